"""The maintenance lock of an s3:// lake (a lease object written with conditional PUTs) and the
conditional PUTs delta-rs's commits rely on, on a real S3 server (SeaweedFS, tests/conftest.py)."""

from __future__ import annotations

import multiprocessing
import threading
import time
from typing import Any

import pyarrow as pa
import pytest
from pi_format import LakeLayout
from pi_jobs.maintenance import MaintenanceBusyError, MaintenanceLeaseLostError, compact, maintenance_lock
from pi_jobs.maintenance._lease import S3Lease

pytestmark = pytest.mark.integration


@pytest.fixture()
def s3_env(seaweed: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    # the lake's writers and the lease take the endpoint and keys from the environment, as
    # `pilake` exports them from the settings
    for key, value in seaweed.storage_options.items():
        monkeypatch.setenv(key, value)
    return seaweed


def _code(err: Exception) -> int:
    return int(getattr(err, "response", {})["ResponseMetadata"]["HTTPStatusCode"])


def test_the_server_honours_conditional_puts(s3_env: Any) -> None:
    client: Any = s3_env.client()
    key = "cond/object"
    first = client.put_object(Bucket=s3_env.bucket, Key=key, Body=b"1", IfNoneMatch="*")["ETag"]
    with pytest.raises(Exception) as again:
        client.put_object(Bucket=s3_env.bucket, Key=key, Body=b"2", IfNoneMatch="*")
    assert _code(again.value) == 412
    client.put_object(Bucket=s3_env.bucket, Key=key, Body=b"3", IfMatch=first)
    with pytest.raises(Exception) as stale:
        client.put_object(Bucket=s3_env.bucket, Key=key, Body=b"4", IfMatch=first)
    assert _code(stale.value) == 412
    assert client.get_object(Bucket=s3_env.bucket, Key=key)["Body"].read() == b"3"


def _append(uri: str, options: dict[str, str], writer: int, commits: int) -> None:
    from deltalake import write_deltalake

    for i in range(commits):
        write_deltalake(uri, pa.table({"w": [writer], "i": [i]}), mode="append", storage_options=options)


def test_concurrent_delta_commits_from_two_processes_lose_nothing(s3_env: Any) -> None:
    from deltalake import DeltaTable, write_deltalake

    uri, options = s3_env.uri("cond/delta"), s3_env.storage_options
    assert "AWS_S3_ALLOW_UNSAFE_RENAME" not in options  # the production path
    write_deltalake(uri, pa.table({"w": [-1], "i": [-1]}), mode="append", storage_options=options)
    spawn = multiprocessing.get_context("spawn")  # delta-rs's runtime does not survive fork
    procs = [spawn.Process(target=_append, args=(uri, options, w, 6)) for w in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0, 0]
    table = DeltaTable(uri, storage_options=options)
    rows = table.to_pyarrow_table().to_pylist()
    # every commit got its own version: a lost race retried on the next one instead of overwriting
    assert table.version() == 12 and len(rows) == 13
    assert sorted((r["w"], r["i"]) for r in rows) == [(-1, -1)] + [(w, i) for w in range(2) for i in range(6)]


def test_two_contenders_take_turns_and_a_stalled_holder_is_taken_over(s3_env: Any) -> None:
    lake = s3_env.uri("lease/lake")
    a, b = S3Lease(lake, "gc", ttl_s=2.0), S3Lease(lake, "compact", ttl_s=2.0)
    a.acquire()
    with pytest.raises(
        MaintenanceBusyError, match=r"holds s3://.*/lease/lake/_pilake_maintenance\.lease \(gc on"
    ):
        b.acquire()
    time.sleep(2.5)  # past one TTL: a's renewals keep it
    with pytest.raises(MaintenanceBusyError):
        b.acquire()
    a.ensure_held()
    a.release()
    b.acquire()  # released: taken at once
    found = b.read()
    assert found is not None and found[0].operation == "compact" and found[0].owner == b.owner
    # b stalls (stops renewing, as a paused process would) past its TTL: a takes over
    b._stop.set()
    assert b._thread is not None
    b._thread.join()
    with pytest.raises(MaintenanceBusyError):
        a.acquire()
    time.sleep(2.2)
    a.acquire()
    with pytest.raises(MaintenanceLeaseLostError, match="expired"):
        b.ensure_held()
    with pytest.raises(MaintenanceLeaseLostError, match="another process took it over"):
        b.renew()
    with pytest.raises(MaintenanceLeaseLostError):
        b.release()
    a.release()


def test_of_contenders_racing_for_a_free_lease_exactly_one_wins(s3_env: Any) -> None:
    for round_ in range(4):
        lake = s3_env.uri(f"lease/race-{round_}")
        leases = [S3Lease(lake, f"op{i}", ttl_s=30.0) for i in range(4)]
        won: list[S3Lease] = []
        start = threading.Barrier(len(leases))

        def contend(lease: S3Lease, start: threading.Barrier = start, won: list[S3Lease] = won) -> None:
            start.wait()
            try:
                lease.acquire()
                won.append(lease)
            except MaintenanceBusyError:
                pass

        threads = [threading.Thread(target=contend, args=(lease,)) for lease in leases]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(won) == 1, [w.operation for w in won]
        won[0].release()


def test_compaction_waits_for_the_lease_gc_holds(s3_env: Any) -> None:
    layout = LakeLayout(s3_env.uri("lease/compact-lake"))
    with maintenance_lock(layout, "gc") as held:
        held.ensure_held()
        with pytest.raises(MaintenanceBusyError, match=r"cannot run compact: .*gc on"):
            compact(layout)
    with maintenance_lock(layout, "compact"):  # released by the first
        pass


def test_gc_deletes_nothing_once_its_lease_is_lost(s3_env: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    from pi_jobs.maintenance import GcConfig, gc

    from tests.fixtures.lake_factory import append_episodes, make_episode

    layout = LakeLayout(s3_env.uri("lease/gc-lake"))
    append_episodes(
        layout, [make_episode(i, steps=4, cameras=("front",), size=(8, 8), seed=0) for i in range(2)], (8, 8)
    )
    gc_module = importlib.import_module("pi_jobs.maintenance.gc")  # the package exports gc() itself
    deletes: list[str] = []

    def remove_orphans(*args: Any, **kwargs: Any) -> int:
        deletes.append("orphans")
        return 0

    def delete_files(*args: Any, **kwargs: Any) -> tuple[dict[str, int], dict[str, int]]:
        deletes.append("files")
        return {}, {}

    monkeypatch.setattr(gc_module, "remove_orphan_files", remove_orphans)
    monkeypatch.setattr(gc_module, "delete_unneeded_files", delete_files)

    def lost(self: S3Lease) -> None:  # as after a stall past the TTL: another GC took the lease over
        raise MaintenanceLeaseLostError(f"{self.operation} lost its maintenance lease {self.uri}")

    monkeypatch.setattr(S3Lease, "ensure_held", lost)
    with pytest.raises(MaintenanceLeaseLostError, match="gc lost its maintenance lease"):
        gc(layout, GcConfig(retention_hours=0))
    assert deletes == []
