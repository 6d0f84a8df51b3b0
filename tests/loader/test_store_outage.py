"""The loader rides out an object-store outage (issue 32 item 3), on the real SeaweedFS server.

Stopping the store mid-epoch costs retries, not the epoch: the samples come back the same, in
the same order. A pinned snapshot reopens from this host's cache with no Delta log load while
the store is up, and opens while it is down; with a cold cache, or an outage longer than the
retry deadline, the error names the endpoint and the deadline, never a hang.
"""

from __future__ import annotations

import hashlib
import os
import re
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from pi_format import LakeLayout
from pi_jobs.maintenance.datasets import create_dataset
from pi_loader import CacheConfig, Dataset, RetryConfig, Snapshot, StoreUnreachableError
from pi_loader.reading._counts import storage_counts
from pi_loader.reading._storage import S3Options

from tests.fixtures.lake_factory import write_lake
from tests.fixtures.seaweedfs import SeaweedS3

FAST = {"initial_backoff_s": 0.05, "max_backoff_s": 0.5}


def _digest(sample: dict[str, object]) -> str:
    h = hashlib.sha256()
    for key in sorted(sample):
        value = sample[key]
        h.update(key.encode())
        h.update(np.asarray(value).tobytes() if isinstance(value, np.ndarray) else repr(value).encode())
    return h.hexdigest()


def _epoch(ds: Dataset, start: int = 0) -> list[str]:
    return [_digest(ds[i]) for i in range(start, len(ds))]


@pytest.fixture(scope="module")
def remote_lake(
    seaweed: SeaweedS3, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Snapshot]]:
    """A lake of 4 episodes (one commit each: one data file each) on SeaweedFS, and a snapshot."""
    root = tmp_path_factory.mktemp("outage")
    write_lake(root / "lake", episodes=4, steps=5, cameras=("front",), size=(32, 24), group=1)
    create_dataset(LakeLayout(str(root / "lake")), "outage-pin")  # uploaded with the lake
    fs = S3Options.from_storage_options(seaweed.storage_options).filesystem()
    for path in sorted((root / "lake").rglob("*")):
        if path.is_file():
            with fs.open_output_stream(
                f"{seaweed.bucket}/outage/lake/{path.relative_to(root / 'lake')}"
            ) as out:
                out.write(path.read_bytes())
    uri = seaweed.uri("outage/lake")
    ds = Dataset(
        uri,
        seed=3,
        action_horizon=2,
        storage_options=seaweed.storage_options,
        cache=CacheConfig(root / "c0", 10**8),
    )
    yield uri, ds.snapshot


def _open(seaweed: SeaweedS3, uri: str, snapshot: Snapshot, cache: Path, deadline_s: float) -> Dataset:
    return Dataset(
        uri,
        snapshot=snapshot,
        seed=3,
        action_horizon=2,
        storage_options=seaweed.storage_options,
        cache=CacheConfig(cache, 10**8),
        retry=RetryConfig(deadline_s=deadline_s, **FAST),
    )


def test_an_epoch_survives_a_store_restart_and_a_pinned_open_needs_no_log(
    seaweed: SeaweedS3, remote_lake: tuple[str, Snapshot], tmp_path: Path
) -> None:
    uri, snapshot = remote_lake
    want = _epoch(_open(seaweed, uri, snapshot, tmp_path / "baseline", 60))

    # Reopening the snapshot with the same cache: the rows come from the host, no Delta log load.
    before = storage_counts()
    again = _open(seaweed, uri, snapshot, tmp_path / "baseline", 60)
    after = storage_counts()
    assert after["delta_log_loads"] == before["delta_log_loads"]
    assert after["delta_log_bytes"] == before["delta_log_bytes"]
    assert after["open_cache_hits"] == before["open_cache_hits"] + 1
    assert again.fingerprint == _open(seaweed, uri, snapshot, tmp_path / "other", 60).fingerprint

    # Mid-epoch: the store goes away after the first sample and is back within the deadline.
    ds = _open(seaweed, uri, snapshot, tmp_path / "cold", 60)
    got = [_digest(ds[0])]
    seaweed.stop()
    restart = threading.Timer(2.0, seaweed.start)
    restart.start()
    try:
        before = storage_counts()
        got += _epoch(ds, start=1)  # the first uncached file waits for the store, retrying
        restart.join()
    finally:
        restart.join()
    assert got == want  # same samples, same order
    assert storage_counts()["storage_retries"] > before["storage_retries"]
    assert storage_counts()["storage_giveups"] == before["storage_giveups"]


def test_a_down_store_opens_from_a_warm_cache_and_fails_clearly_from_a_cold_one(
    seaweed: SeaweedS3, remote_lake: tuple[str, Snapshot], tmp_path: Path
) -> None:
    uri, snapshot = remote_lake
    want = _epoch(_open(seaweed, uri, snapshot, tmp_path / "warm", 60))
    half = _open(seaweed, uri, snapshot, tmp_path / "half", 2)
    half[0]  # this cache holds the open and one sample's files, not the others'
    seaweed.stop()
    try:
        before = storage_counts()
        warm = _open(seaweed, uri, snapshot, tmp_path / "warm", 2)
        assert storage_counts()["open_cache_offline_hits"] == before["open_cache_offline_hits"] + 1
        assert _epoch(warm) == want  # every file is on this host: no store needed

        endpoint = re.escape(seaweed.endpoint_url)
        with pytest.raises(
            StoreUnreachableError, match=rf"store at {endpoint} is unreachable.*deadline is 2 s"
        ):
            for i in range(len(half)):  # an outage longer than the deadline: an error, no hang
                half[i]
        with pytest.raises(StoreUnreachableError, match=rf"{endpoint}.*no cached open") as cold:
            _open(seaweed, uri, snapshot, tmp_path / "cold", 1)
        assert "lake root right" not in str(cold.value)
        with pytest.raises(
            StoreUnreachableError, match=rf"cannot open the episodes table.*{endpoint}"
        ) as new:
            Dataset(
                uri,
                action_horizon=2,
                storage_options=seaweed.storage_options,
                cache=CacheConfig(tmp_path / "cold", 10**8),
                retry=RetryConfig(deadline_s=1, **FAST),
            )
        assert "lake root right" not in str(new.value)
        assert seaweed.secret_access_key not in str(new.value) + str(cold.value)
    finally:
        seaweed.start()


def test_a_pin_by_name_opens_while_the_store_is_down(
    seaweed: SeaweedS3, remote_lake: tuple[str, Snapshot], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri, _ = remote_lake
    for key, value in seaweed.storage_options.items():  # the pins table is read as deltalake's env says
        monkeypatch.setenv(key, value)
    first = _open(seaweed, uri, "outage-pin", tmp_path / "warm", 60)  # type: ignore[arg-type]
    want = _epoch(first)
    seaweed.stop()
    try:
        again = _open(seaweed, uri, "outage-pin", tmp_path / "warm", 2)  # type: ignore[arg-type]
        assert again.fingerprint == first.fingerprint and _epoch(again) == want
        with pytest.raises(StoreUnreachableError, match=r"dataset pin 'outage-pin'.*never opened it"):
            _open(seaweed, uri, "outage-pin", tmp_path / "cold", 1)  # type: ignore[arg-type]
    finally:
        seaweed.start()


def test_a_frozen_store_costs_timeouts_and_retries_never_a_hang(
    seaweed: SeaweedS3, remote_lake: tuple[str, Snapshot], tmp_path: Path
) -> None:
    """SIGSTOP: the store accepts connections and answers nothing; each try ends at its timeout."""
    from pi_jobs.local.object_store import _read_state

    uri, snapshot = remote_lake
    want = _epoch(_open(seaweed, uri, snapshot, tmp_path / "baseline", 60))
    ds = Dataset(
        uri,
        snapshot=snapshot,
        seed=3,
        action_horizon=2,
        storage_options=seaweed.storage_options,
        cache=CacheConfig(tmp_path / "cold", 10**8),
        retry=RetryConfig(deadline_s=60, connect_timeout_s=1, request_timeout_s=1, **FAST),
    )
    got = [_digest(ds[0])]
    pid = _read_state(seaweed.run_dir)["pid"]
    assert isinstance(pid, int)
    os.killpg(pid, signal.SIGSTOP)
    thaw = threading.Timer(3.0, os.killpg, (pid, signal.SIGCONT))
    thaw.start()
    try:
        before = storage_counts()
        got += _epoch(ds, start=1)
    finally:
        thaw.cancel()
        os.killpg(pid, signal.SIGCONT)
    assert got == want
    assert storage_counts()["storage_retries"] > before["storage_retries"]
