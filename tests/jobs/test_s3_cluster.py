"""The production storage paths, run the way they run: the stream job on a Flink session cluster at
parallelism 2, writing an s3:// lake on a real S3 server (SeaweedFS, with the production setting
AWS_CONDITIONAL_PUT=etag and no AWS_S3_ALLOW_UNSAFE_RENAME) and indexing it in a ClickHouse server
catalog (http://: the chdb HTTP test double, tests/fixtures/clickhouse_http_double.py).

1. A third of the episodes is uploaded and committed; then the object store AND the catalog server
   go down for 30 s while the next third is uploaded: the job must ride it out (its sink retries
   with back-off; no Flink restart, no failure) and commit everything once they are back.
2. The TaskManager is SIGKILLed, the last third is uploaded, a new TaskManager starts: the job
   restores its checkpoint and commits them, nothing is lost or doubled; `pilake audit` (lake on
   S3, catalog on the server) is clean.
3. pi_loader's Dataset reads the s3:// lake through its disk cache (a second pass is served
   while the object store is down), compaction and GC run on it under the S3 maintenance lease,
   and the samples are unchanged; the server catalog holds what an embedded catalog rebuilt from
   the lake holds.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.conftest import _free_port
from tests.fixtures.clickhouse_http_double import chdb_http_server
from tests.jobs.test_flink_cluster import NO_RESEND_S, _pilake, _poll

pytestmark = pytest.mark.integration

USER, PASSWORD = "pilake", "pw-s3-cluster-Ux82"
OUTAGE_S = 30.0
TIMEOUT_S = 240.0
_DETACHED = re.compile(r"stream: job ([0-9a-f]{32}) running on")
ROWS = "SELECT * EXCEPT (indexed_at, episodes_version) FROM episodes ORDER BY episode_id"


def _samples(ds: Any) -> list[tuple[str, int, bytes]]:
    out = []
    for i in range(len(ds)):
        s = ds[i]
        out.append(
            (str(s["episode_id"]), int(s["step"]), np.asarray(s["observation.images.cam_high"]).tobytes())
        )
    return sorted(out)


def test_stream_job_on_a_cluster_writes_s3_and_a_server_catalog_through_outages_and_a_kill(
    tmp_path: Path, stack_settings: Any, seaweed: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pi_catalog import Catalog
    from pi_catalog._connection import PASSWORD_ENV, USER_ENV
    from pi_format import LakeLayout
    from pi_jobs.local.faults import FaultStack
    from pi_jobs.local.faults._messages import simulated
    from pi_jobs.local.flink_cluster import (
        cluster_log_dir,
        start_taskmanager,
        stop_local_cluster,
        taskmanager_pids,
    )
    from pi_jobs.local.flink_submit import ClusterJob
    from pi_jobs.maintenance import CompactConfig, GcConfig, compact, gc
    from pi_jobs.maintenance._lease import S3Lease
    from pi_jobs.stream._logs import log_tail
    from pi_loader import CacheConfig, Dataset, SampleSpec

    t0 = time.monotonic()
    phases: dict[str, float] = {}

    def mark(name: str) -> None:
        phases[name] = round(time.monotonic() - t0, 1)

    lake = seaweed.uri(f"cluster-{uuid.uuid4().hex[:8]}/lake")
    for key, value in seaweed.storage_options.items():  # what `source <home>/s3.env` sets
        monkeypatch.setenv(key, value)
    monkeypatch.setenv(USER_ENV, USER)
    monkeypatch.setenv(PASSWORD_ENV, PASSWORD)
    catalog_dir, catalog_port = str(tmp_path / "clickhouse"), _free_port()
    episodes = simulated(7700, robots=2, episodes=3)
    first, second, third = episodes[:2], episodes[2:4], episodes[4:]
    url = f"http://127.0.0.1:{_free_port()}"
    catalog = contextlib.ExitStack()
    catalog.enter_context(chdb_http_server(catalog_dir, user=USER, password=PASSWORD, port=catalog_port))
    try:
        monkeypatch.setenv("PILAKE_LAKE", lake)
        monkeypatch.setenv("PILAKE_CATALOG", f"http://127.0.0.1:{catalog_port}/pilake")
        with FaultStack(tmp_path / "home", jar_cache=Path(stack_settings.jar_dir)) as stack:
            settings = replace(stack.settings, flink_rest_url=url)
            env = {**stack.env(), "PILAKE_FLINK_URL": url}

            def logs() -> str:
                return log_tail(cluster_log_dir(settings))

            try:
                up = _pilake(env, "up", "--flink")
                assert up.returncode == 0, up.stdout + up.stderr
                mark("up")
                with stack.uploader("robot", resend_after_s=NO_RESEND_S) as uploader:
                    for ep in first:
                        uploader.submit(ep)
                    uploader.send_pending()
                    # detached, as a deployment runs it (no idle stop that could end it early)
                    code, output = stack.run_stream("--cluster", url, "--parallelism", "2")
                    submitted = _DETACHED.search(output)
                    assert code == 0 and submitted, output[-3000:] + logs()
                    job_id = submitted.group(1)
                    job = ClusterJob(url, job_id, cluster_log_dir(settings))
                    _poll(
                        "the first half committed and a checkpoint",
                        TIMEOUT_S,
                        lambda: (
                            True
                            if stack.progress().get("committed", 0) >= len(first)
                            and job.checkpoints().completed >= 1
                            else None
                        ),
                        lambda: f"job {job.status()}, progress {stack.progress()}\n{logs()}",
                    )
                    mark("first_half")

                    # 1. the object store and the catalog server go down together for 30 s
                    seaweed.stop()
                    catalog.close()
                    for ep in second:
                        uploader.submit(ep)
                    uploader.send_pending()
                    time.sleep(OUTAGE_S)
                    committed_in_outage = stack.progress().get("committed", 0)
                    seaweed.start()
                    catalog = contextlib.ExitStack()
                    catalog.enter_context(
                        chdb_http_server(catalog_dir, user=USER, password=PASSWORD, port=catalog_port)
                    )
                    mark("outage_over")
                    _poll(
                        "every episode committed after the outage",
                        TIMEOUT_S,
                        lambda: (
                            True if stack.progress().get("committed", 0) >= len(first) + len(second) else None
                        ),
                        lambda: f"job {job.status()}, progress {stack.progress()}\n{logs()}",
                    )
                    status_after_outage = job.status()
                    restarts_in_outage = _restarts(cluster_log_dir(settings))
                    mark("second_half")

                    # 2. the job's TaskManager is SIGKILLed and replaced
                    _poll(
                        "a checkpoint after the outage",
                        TIMEOUT_S,
                        lambda: True if job.checkpoints().completed >= 2 else None,
                        lambda: f"job {job.status()}, {job.checkpoints()}\n{logs()}",
                    )
                    killed = taskmanager_pids(settings)
                    assert len(killed) == 1, killed
                    os.kill(killed[0], signal.SIGKILL)
                    _poll(
                        "TaskManager exit", 60, lambda: True if not taskmanager_pids(settings) else None, str
                    )
                    for ep in third:  # only the restored job can commit these
                        uploader.submit(ep)
                    uploader.send_pending()
                    start_taskmanager(settings)
                    restored = _poll(
                        "restore from a checkpoint",
                        TIMEOUT_S,
                        lambda: job.checkpoints().restored_id if job.status() == "RUNNING" else None,
                        lambda: f"job {job.status()}, {job.checkpoints()}\n{logs()}",
                    )
                    report = uploader.run_until_confirmed(timeout_s=TIMEOUT_S)
                    assert not report.pending, (
                        f"never confirmed: {report.pending}; job {job.status()}\n{logs()}"
                    )
                    mark("restored")
                progress = stack.progress()
                job.cancel()
                audit = stack.audit()
                mark("audit")
            finally:
                _pilake(env, "down")
                stop_local_cluster(settings)

        # 3. the loader reads the s3:// lake through its cache; compaction and GC under the lease
        layout = LakeLayout(lake)
        spec = SampleSpec(cameras=("cam_high",))
        cache = CacheConfig(tmp_path / "loader-cache", 10**9)
        ds = Dataset(layout, spec=spec, storage_options=seaweed.storage_options, cache=cache)
        before = _samples(ds)
        seaweed.stop()  # the second pass needs nothing but the cache
        try:
            cached = _samples(ds)
        finally:
            seaweed.start()
        compacted = compact(layout, CompactConfig(target_file_bytes=1 << 30, small_group_bytes=1 << 29))
        collected = gc(layout, GcConfig(retention_hours=0))
        after = _samples(Dataset(layout, spec=spec, storage_options=seaweed.storage_options, cache=cache))
        lease = S3Lease(lake, "check").read()
        # the stream job's records in the server catalog = an embedded catalog rebuilt from the lake
        # (but the episodes version each row was read at: compaction and GC rewrote the table)
        served, reference = Catalog(f"http://127.0.0.1:{catalog_port}/pilake"), Catalog(str(tmp_path / "ref"))
        try:
            reference.rebuild(layout)
            indexed, rebuilt = (c.query_arrow(ROWS).to_pylist() for c in (served, reference))
        finally:
            served.close()
            reference.close()
        mark("loader_maintenance")
    finally:
        catalog.close()

    observed = {
        "committed_in_outage": committed_in_outage,
        "restarts_in_outage": restarts_in_outage,
        "status_after_outage": status_after_outage,
        "restored_checkpoint": restored,
        "committed": progress.get("committed"),
        "duplicates": progress.get("duplicates"),
        "files_before_after": (compacted.files_before, compacted.files_after),
        "phases_s": phases,
    }
    print(observed, {k: audit[k] for k in ("episodes_in", "visible", "missing", "duplicated")})
    # the outage: nothing could commit, the job neither failed nor restarted, and caught up after
    assert committed_in_outage == len(first), observed
    assert restarts_in_outage == 0 and status_after_outage == "RUNNING", observed
    # the kill: restored, and only Flink's recovery delivered (the uploader never re-sent)
    assert restored >= 1 and report.resent_episodes == 0, observed
    assert progress.get("subtasks") == 2, "parallelism 2: two sink subtasks"
    assert audit["ok"] and (audit["missing"], audit["duplicated"]) == (0, 0), audit
    assert audit["visible"] == audit["episodes_in"] == len(episodes) and audit["quarantined"] == 0, audit
    # the loader: every episode, a cached second pass, the same samples after compaction and GC
    assert {s[0] for s in before} == {ep.episode_id for ep in episodes}
    assert cached == before and after == before
    assert compacted.files_after["steps"] < compacted.files_before["steps"], observed
    assert collected.dry_run is False
    assert lease is not None and lease[0].operation == "gc" and lease[0].expires_at == 0.0  # released
    assert indexed == rebuilt and len(indexed) == len(episodes)


def _restarts(log_dir: Path) -> int:
    """How often the cluster restarted a job (its JobManager's log)."""
    return sum(
        p.read_text(errors="replace").count("switched from state RUNNING to RESTARTING")
        for p in log_dir.glob("*standalonesession*.log")
    )
