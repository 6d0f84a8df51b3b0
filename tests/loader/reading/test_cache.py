"""pi_loader's host-wide disk cache: hits and misses, LRU eviction, limits, restarts, processes."""

from __future__ import annotations

import hashlib
import multiprocessing as mp
import os
import pickle
import random
import threading
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import BinaryIO

import pytest
from pi_loader._errors import PiLoaderError
from pi_loader.reading._cache import CacheConfig, CacheStats, DiskCache, StorageError


def payload(key: str, size_bytes: int) -> bytes:
    """Deterministic, key-specific bytes, so a mixed-up entry shows."""
    seed = hashlib.sha256(key.encode()).digest()
    return (seed * (size_bytes // len(seed) + 1))[:size_bytes]


class Source:
    """A fetch function over an in-memory store that counts its calls (per process)."""

    def __init__(self, sizes: dict[str, int], delay_s: float = 0.0) -> None:
        self.sizes = sizes
        self.delay_s = delay_s
        self.calls: list[str] = []
        self._lock = threading.Lock()

    def fetcher(self, key: str) -> Callable[[BinaryIO], None]:
        def fetch(out: BinaryIO) -> None:
            with self._lock:
                self.calls.append(key)
            data = payload(key, self.sizes[key])
            half = len(data) // 2
            out.write(data[:half])
            if self.delay_s:
                time.sleep(self.delay_s)  # widen the window in which others may race
            out.write(data[half:])

        return fetch

    def get(self, cache: DiskCache, key: str) -> str:
        return cache.get(key, size_bytes=self.sizes[key], fetch=self.fetcher(key), suffix=".bin")


def writes(data: bytes) -> Callable[[BinaryIO], None]:
    def fetch(out: BinaryIO) -> None:
        out.write(data)

    return fetch


def assert_consistent(cache: DiskCache, source_sizes: dict[str, int]) -> None:
    """The usage ledger matches the directory, the limit holds, every entry has its own bytes."""
    root = cache.config.directory
    assert cache.stats().size_bytes == cache.scan_size_bytes() <= cache.config.max_size_bytes
    assert list((root / "tmp").iterdir()) == []
    by_name = {hashlib.sha256(k.encode()).hexdigest() + ".bin": k for k in source_sizes}
    for path in (root / "objects").rglob("*.bin"):
        key = by_name[path.name]
        assert path.read_bytes() == payload(key, source_sizes[key]), key


def test_config_validation(tmp_path: Path) -> None:
    assert CacheConfig(str(tmp_path), 10).directory == tmp_path  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_size_bytes must be > 0, got 0"):
        CacheConfig(tmp_path, 0)
    with pytest.raises(TypeError, match="max_size_bytes must be an int, got bool"):
        CacheConfig(tmp_path, True)
    with pytest.raises(TypeError, match="max_size_bytes must be an int, got float"):
        CacheConfig(tmp_path, 1e9)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="must be a local path"):
        CacheConfig(Path("s3://bucket/cache"), 10)
    with pytest.raises(ValueError, match="must be a local path"):
        CacheConfig("s3://bucket/cache", 10)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"directory must be a pathlib\.Path or str"):
        CacheConfig(7, 10)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="config must be a CacheConfig"):
        DiskCache(tmp_path)  # type: ignore[arg-type]


def test_miss_then_hit_fetches_once(tmp_path: Path) -> None:
    source = Source({"a": 1000, "b": 10})
    cache = DiskCache(CacheConfig(tmp_path, 10_000))
    first = source.get(cache, "a")
    assert Path(first).read_bytes() == payload("a", 1000)
    assert first.endswith(".bin") and first.startswith(str(tmp_path))
    assert source.get(cache, "a") == first
    source.get(cache, "b")
    assert source.calls == ["a", "b"]
    assert cache.stats() == CacheStats(
        hits=1,
        misses=2,
        evictions=0,
        downloaded_bytes=1010,
        evicted_bytes=0,
        size_bytes=1010,
        max_size_bytes=10_000,
    )
    with cache.open("a", size_bytes=1000, fetch=source.fetcher("a"), suffix=".bin") as f:
        assert f.read() == payload("a", 1000)
    assert source.calls == ["a", "b"]


def test_lru_eviction_keeps_recently_used_and_stays_under_limit(tmp_path: Path) -> None:
    sizes = {k: 300 for k in "abcdefgh"}
    source = Source(sizes)
    cache = DiskCache(CacheConfig(tmp_path, 1000))
    for key in "abc":
        source.get(cache, key)
    source.get(cache, "a")  # a is now the most recently used; b the least
    source.get(cache, "d")  # 900 + 300 > 1000: b must go
    assert cache.stats().evictions >= 1
    assert source.calls == ["a", "b", "c", "d"]
    source.get(cache, "a")
    source.get(cache, "d")
    assert source.calls == ["a", "b", "c", "d"]  # both still cached
    source.get(cache, "b")
    assert source.calls[-1] == "b"  # b was evicted and fetched again
    for key in "efgh":
        source.get(cache, key)
        assert cache.scan_size_bytes() <= 1000
    stats = cache.stats()
    assert stats.evicted_bytes == 300 * stats.evictions
    assert stats.size_bytes == 300 * (len(source.calls) - stats.evictions)
    assert_consistent(cache, sizes)


def test_file_larger_than_the_cache_is_a_clear_error(tmp_path: Path) -> None:
    source = Source({"big": 2000})
    cache = DiskCache(CacheConfig(tmp_path, 1000))
    with pytest.raises(StorageError, match=r"big is 2000 bytes, larger than the whole cache.*=1000") as info:
        source.get(cache, "big")
    assert isinstance(info.value, PiLoaderError)
    assert source.calls == []  # refused before downloading anything


def test_short_or_failed_fetch_leaves_no_entry(tmp_path: Path) -> None:
    cache = DiskCache(CacheConfig(tmp_path, 1000))
    with pytest.raises(StorageError, match="fetched 5 bytes, expected 9"):
        cache.get("k", size_bytes=9, fetch=writes(b"12345"))

    def boom(out: BinaryIO) -> None:
        out.write(b"123")
        raise ConnectionError("reset by peer")

    with pytest.raises(ConnectionError, match="reset by peer"):
        cache.get("k", size_bytes=9, fetch=boom)
    assert list((tmp_path / "tmp").iterdir()) == []
    assert cache.scan_size_bytes() == 0 == cache.stats().size_bytes
    # and the key still works afterwards
    path = cache.get("k", size_bytes=3, fetch=writes(b"abc"))
    assert Path(path).read_bytes() == b"abc"


def test_argument_errors(tmp_path: Path) -> None:
    cache = DiskCache(CacheConfig(tmp_path, 1000))
    with pytest.raises(ValueError, match="size_bytes must be an int >= 0, got -1"):
        cache.get("k", size_bytes=-1, fetch=lambda out: None)
    with pytest.raises(ValueError, match=r"size_bytes must be an int >= 0, got 2\.5"):
        cache.get("k", size_bytes=lambda: 2.5, fetch=lambda out: None)  # type: ignore[arg-type,return-value]
    with pytest.raises(ValueError, match="suffix must be a plain file name suffix"):
        cache.get("k", size_bytes=1, fetch=lambda out: None, suffix="/x")


def test_unusable_directory_is_a_storage_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    cache = DiskCache(CacheConfig(blocker / "cache", 1000))
    with pytest.raises(StorageError, match="cannot use the cache directory"):
        cache.get("k", size_bytes=1, fetch=lambda out: None)


def test_survives_restart_and_rebuilds_its_accounting(tmp_path: Path) -> None:
    sizes = {"a": 100, "b": 200, "c": 400}
    source = Source(sizes)
    cache = DiskCache(CacheConfig(tmp_path, 1000))
    for key in sizes:
        source.get(cache, key)
    # A crash mid-download (tmp file of a dead process) and a torn usage ledger.
    dead = mp.get_context("fork").Process(target=os._exit, args=(0,))
    dead.start()
    dead.join()
    assert dead.pid is not None
    (tmp_path / "tmp" / f"{'0' * 64}.{dead.pid}.1.tmp").write_bytes(b"partial")
    (tmp_path / "usage").write_text("garbage")

    restarted = DiskCache(CacheConfig(tmp_path, 1000))
    for key in sizes:
        source.get(restarted, key)
    assert source.calls == list(sizes)  # all hits after the restart
    assert restarted.stats().hits == 3 and restarted.stats().misses == 0
    assert restarted.stats().size_bytes == 700
    assert_consistent(restarted, sizes)

    # Files removed by hand: the ledger overcounts until the next eviction rescans.
    for path in (tmp_path / "objects").rglob("*.bin"):
        path.unlink()
    source.sizes["d"] = 900
    source.get(restarted, "d")
    assert restarted.stats().size_bytes == 900
    assert_consistent(restarted, source.sizes)


def test_pickles_config_only(tmp_path: Path) -> None:
    source = Source({"a": 10})
    cache = DiskCache(CacheConfig(tmp_path, 1000))
    source.get(cache, "a")
    clone = pickle.loads(pickle.dumps(cache))
    assert clone.config == cache.config
    assert clone.stats().hits == 0 and clone.stats().size_bytes == 10
    assert "DiskCache(CacheConfig(" in repr(clone)


def test_threads_fetch_each_key_once(tmp_path: Path) -> None:
    sizes = {f"k{i}": 1000 + i for i in range(6)}
    source = Source(sizes, delay_s=0.01)
    cache = DiskCache(CacheConfig(tmp_path, 100_000))
    keys = list(sizes) * 4
    with ThreadPoolExecutor(4) as pool:
        paths = list(pool.map(lambda k: source.get(cache, k), keys))
    assert sorted(source.calls) == sorted(sizes)
    for key, path in zip(keys, paths, strict=True):
        assert Path(path).read_bytes() == payload(key, sizes[key])
    stats = cache.stats()
    assert (stats.hits, stats.misses) == (len(keys) - len(sizes), len(sizes))
    assert_consistent(cache, sizes)


def _worker(cache: DiskCache, sizes: dict[str, int], order: list[str], delay_s: float, out: mp.Queue) -> None:
    try:
        source = Source(sizes, delay_s=delay_s)
        for key in order:
            path = source.get(cache, key)
            size = cache.scan_size_bytes()
            assert size <= cache.config.max_size_bytes, f"over the limit: {size}"  # at every moment
            # The returned path is readable right away, with the key's bytes. Under heavy eviction
            # the entry may already be gone by now (see the cache's docstring), but never wrong.
            try:
                data = Path(path).read_bytes()
            except FileNotFoundError:
                continue
            assert data == payload(key, sizes[key]), f"wrong bytes for {key}"
        stats = cache.stats()
        out.put((os.getpid(), stats.hits, stats.misses, stats.evictions, sorted(source.calls)))
    except BaseException:
        out.put(traceback.format_exc())  # the parent fails with the child's traceback
        raise


def _run_processes(
    cache: DiskCache, sizes: dict[str, int], orders: list[list[str]], delay_s: float = 0.002
) -> list[tuple]:
    ctx = mp.get_context("fork")  # the cache object is inherited unpickled, as in DataLoader workers
    out: mp.Queue = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(cache, sizes, order, delay_s, out)) for order in orders]
    for p in procs:
        p.start()
    results = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    failures = [r for r in results if isinstance(r, str)]
    assert not failures, failures[0]
    assert [p.exitcode for p in procs] == [0] * len(procs)
    return results


def test_two_processes_download_each_file_once_per_host(tmp_path: Path) -> None:
    sizes = {f"f{i:02d}": 2000 + 37 * i for i in range(12)}
    cache = DiskCache(CacheConfig(tmp_path, 10**6))
    keys = list(sizes)
    results = _run_processes(cache, sizes, [keys, keys[::-1]])
    fetched = [k for *_, calls in results for k in calls]
    assert sorted(fetched) == sorted(keys)  # each file downloaded by exactly one process
    assert sum(r[2] for r in results) == len(keys)
    assert sum(r[1] for r in results) == len(keys)
    assert_consistent(cache, sizes)


def test_two_processes_under_eviction_pressure_end_consistent(tmp_path: Path) -> None:
    sizes = {f"f{i:02d}": 3000 + 101 * i for i in range(16)}
    limit = 12_000  # about 3 files: every few misses evict
    cache = DiskCache(CacheConfig(tmp_path, limit))
    keys = list(sizes)
    rng = random.Random(7)
    orders = [rng.sample(keys, len(keys)) * 3 for _ in range(4)]  # 4 processes: more contention
    results = _run_processes(cache, sizes, orders, delay_s=0.0)
    assert sum(r[3] for r in results) > 0  # evictions happened
    assert_consistent(cache, sizes)
    assert cache.scan_size_bytes() <= limit
