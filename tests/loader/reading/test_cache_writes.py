"""`pi_loader.reading._cache_writes`: the host cache files of a large open are written in a
thread, and nothing can read half of one: a load in the same process waits for the write, a
write that fails leaves no entry (the next open reads the lake), an entry cut or flipped at any
byte while or after it was written is a miss (seeded generator), and a forked child does not
wait for its parent's writes."""

from __future__ import annotations

import os
import random
import threading
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from pi_loader.reading import _cache_writes, _episodes_rows
from pi_loader.reading._cache_writes import pending_writes, settle, write_later
from pi_loader.reading._open_cache import OpenCache

VERSIONS = {"episodes": 3, "steps": 4, "video": 5}
FINGERPRINT = "3f2a9c"


def _rows(n: int = 3_000) -> pa.Table:
    return pa.table(
        {
            "episode_id": [f"r1-{i:06d}" for i in range(n)],
            "step_count": pa.array(range(n), pa.int64()),
            "proprio_mean": pa.array([[float(i), 1.0] for i in range(n)], pa.list_(pa.float32())),
        }
    )


@pytest.fixture
def in_background(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every cache write in a thread (the threshold is 64 MB: these rows are a few kB)."""
    monkeypatch.setattr(_cache_writes, "BACKGROUND_BYTES", 0)
    yield


def test_a_background_save_returns_before_the_write_and_a_load_waits_for_it(
    tmp_path: Path, in_background: None
) -> None:
    cache = OpenCache(tmp_path / "opens")
    rows = _rows()
    gate = threading.Event()
    real = cache._save

    def held(*args: object) -> None:
        gate.wait(timeout=30)  # the write cannot finish before the test lets it
        real(*args)  # type: ignore[arg-type]

    cache._save = held  # type: ignore[method-assign,assignment]
    cache.save(FINGERPRINT, VERSIONS, rows, ["steps"])  # returns with the write held
    assert pending_writes() == 1
    assert not list((tmp_path / "opens").glob("*.arrow"))
    threading.Timer(0.2, gate.set).start()
    entry = cache.load(FINGERPRINT, VERSIONS)  # settles: waits for the held write
    assert entry is not None and entry.rows.equals(rows) and entry.checksummed == {"steps"}
    assert pending_writes() == 0


def test_a_failing_background_write_leaves_no_entry_and_the_next_save_works(
    tmp_path: Path, in_background: None, caplog: pytest.LogCaptureFixture
) -> None:
    cache = OpenCache(tmp_path / "opens")
    rows = _rows()

    def broken(*args: object) -> None:
        raise RuntimeError("disk on fire")

    cache._save = broken  # type: ignore[method-assign,assignment]
    cache.save(FINGERPRINT, VERSIONS, rows, [])
    assert cache.load(FINGERPRINT, VERSIONS) is None  # a miss, not an exception
    assert "host cache write" in caplog.text
    del cache._save  # the real method again
    cache.save(FINGERPRINT, VERSIONS, rows, [])
    entry = cache.load(FINGERPRINT, VERSIONS)
    assert entry is not None and entry.rows.equals(rows)


def test_a_background_save_into_an_unwritable_place_only_costs_the_entry(
    tmp_path: Path, in_background: None
) -> None:
    (tmp_path / "opens").write_bytes(b"a file where the directory should be")
    cache = OpenCache(tmp_path / "opens")
    cache.save(FINGERPRINT, VERSIONS, _rows(), [])
    assert cache.load(FINGERPRINT, VERSIONS) is None
    assert cache.newest(FINGERPRINT) is None


def test_entries_damaged_at_generated_bytes_are_misses_never_other_rows(
    tmp_path: Path, in_background: None
) -> None:
    cache = OpenCache(tmp_path / "opens")
    rows = _rows()
    rng = random.Random(20261127)
    for trial in range(25):
        cache.save(FINGERPRINT, VERSIONS, rows, [])
        settle(cache.directory)
        (path,) = cache.directory.glob("*.arrow")
        data = bytearray(path.read_bytes())
        how = rng.choice(["cut", "flip", "grow", "zero"])
        at = rng.randrange(len(data))
        if how == "cut":
            data = data[:at]
        elif how == "flip":
            data[at] ^= 1 << rng.randrange(8)
        elif how == "grow":
            data += bytes(rng.randrange(1, 4096))
        else:
            data[at : at + 512] = bytes(len(data[at : at + 512]))
        if bytes(data) == path.read_bytes():  # a zeroed span that was zeros already
            continue
        path.write_bytes(bytes(data))
        assert cache.load(FINGERPRINT, VERSIONS) is None, (trial, how, at)
        assert not path.exists()
    cache.save(FINGERPRINT, VERSIONS, rows, [])  # the good entry beside still goes through
    entry = cache.load(FINGERPRINT, VERSIONS)
    assert entry is not None and entry.rows.equals(rows)


def test_a_segment_written_in_the_background_serves_the_next_open_in_the_process(
    tmp_path: Path, in_background: None
) -> None:
    uris = [f"file:///lake/episodes/part-{i:03d}.parquet" for i in range(40)]
    schema = pa.schema([pa.field("episode_id", pa.string())])
    reads: list[int] = []

    def read(indices: object) -> pa.Table:
        chosen = list(indices)  # type: ignore[call-overload]
        reads.append(len(chosen))
        return pa.table(
            {
                "episode_id": pa.array([f"e{i:03d}" for i in chosen], pa.string()),
                _episodes_rows.FILE_COLUMN: pa.array(chosen, pa.int32()),
            }
        )

    first = _episodes_rows.episodes_rows(tmp_path, uris, schema, read)
    second = _episodes_rows.episodes_rows(tmp_path, uris, schema, read)  # waits for the segment
    assert reads == [40] and second.sort_by("episode_id").equals(first.sort_by("episode_id"))


def test_a_forked_child_does_not_wait_for_its_parents_writes(tmp_path: Path) -> None:
    gate = threading.Event()
    write_later(tmp_path, lambda: gate.wait(timeout=30))
    assert pending_writes() == 1
    pid = os.fork()
    if pid == 0:  # the child: no pending write, settle returns at once
        try:
            settle(tmp_path)
            os._exit(0 if pending_writes() == 0 else 3)
        except BaseException:
            os._exit(4)
    _, status = os.waitpid(pid, 0)
    gate.set()
    settle(tmp_path)
    assert os.waitstatus_to_exitcode(status) == 0
    assert pending_writes() == 0
