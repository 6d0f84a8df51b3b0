"""Byte ranges of s3:// lake files, fetched on demand into the host's disk cache (a sparse cache).

A cold sample of an s3:// lake needs a few small pieces of a few large files: one video column
chunk per camera, the steps pages of its window, and (once per host per file) the file's footer
and the small columns its host index is built from. `S3Storage.read_range` fetches exactly
those bytes with ranged GETs and keeps each fetched range as an entry of the same `DiskCache`
the whole files use, so a warm read fetches nothing and the cache's limit, LRU eviction and
size accounting cover ranges and whole files alike.

Keys (what `pilake dataset stage` and any other filler must match): an object's digest is
`sha256(f"{endpoint_url or 'aws'}\\n{uri}")` (`_cache_directory.key_digest`), as for whole files.
In `<cache>/objects/<digest[:2]>/`:

* `<digest><suffix>` (e.g. `.parquet`): the whole object (`Storage.local_path`, or a stage). A
  ranged read uses it first when it is there: a staged file costs no request at all.
* `<digest>.r<start>-<end>`: bytes [start, end) of the object, exactly as the store sent them.
* `<digest>.sz<size>`: an empty file whose name records the object's size (so a warm reader
  needs no HEAD request to key its host indexes by size).

Integrity is the readers' business, as before: every range is bytes of a page or a footer whose
CRC (or structure) the reader checks after reading it (architecture decision 10), whether it
came from the store or from the cache. Ranges are immutable (Delta data files never change), so
overlapping entries never disagree unless the disk damaged one, which the CRC then reports.

Counters (per process, in `Dataset.read_stats`): "s3_fetched_bytes" and "s3_range_requests"
(ranged GETs that returned), "s3_range_hits" (reads served from cached ranges or whole files).

Example:
    >>> ranges = RangeCache(disk_cache)
    >>> ranges.read(key, ".parquet", 4096, 512, fetch=lambda start, size: get(start, size))
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pi_loader.reading import _file_handles as file_handles
from pi_loader.reading._cache import DiskCache
from pi_loader.reading._cache_directory import key_digest, mark_used

__all__ = ["RangeCache", "coalesce", "range_counts"]

# A prefetch (the column chunks pyarrow reads to build a host index: a few small columns of
# every row group, separated by the large `data` chunks) merges ranges across the smallest gaps
# while the gap bytes fetched stay within this fraction of the bytes asked for: fewer requests,
# and never more than 1.25x the bytes (the per-sample reads themselves are exact).
COALESCE_BUDGET = 0.25
# A coalesced range grows no larger than this (memory of one request; larger asks are split).
MAX_COALESCED_BYTES = 8 * 2**20
# Ranged GETs of one prefetch in flight at once (a store answers them in parallel; requests
# that wait on the network do not hold the GIL).
PREFETCH_THREADS = 8
# Objects whose known ranges one process remembers (a dict of sorted (start, end) per object).
_KNOWN_OBJECTS = 4096

_lock = threading.Lock()
_counts = {"s3_fetched_bytes": 0, "s3_range_requests": 0, "s3_range_hits": 0}


def range_counts() -> dict[str, int]:
    """This process's ranged reads of s3:// files (see the module docstring)."""
    with _lock:
        return dict(_counts)


def _count(name: str, value: int = 1) -> None:
    with _lock:
        _counts[name] += value


def coalesce(spans: Sequence[tuple[int, int]], budget: float = COALESCE_BUDGET) -> list[tuple[int, int]]:
    """(start, size) spans merged where they overlap or touch, and across the smallest gaps
    while the gap bytes stay within `budget` x the bytes of the spans; no merged span over
    MAX_COALESCED_BYTES (unless one span alone is).

    Example:
        >>> coalesce([(0, 10), (12, 10), (100_000, 5)])
        [(0, 22), (100000, 5)]
    """
    merged: list[list[int]] = []
    for start, size in sorted((int(s), int(n)) for s, n in spans if n > 0):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], start + size)
        else:
            merged.append([start, start + size])
    if len(merged) < 2:
        return [(a, b - a) for a, b in merged]
    allowance = budget * sum(b - a for a, b in merged)
    gaps = sorted(range(len(merged) - 1), key=lambda i: merged[i + 1][0] - merged[i][1])
    join = [False] * (len(merged) - 1)
    for i in gaps:
        gap = merged[i + 1][0] - merged[i][1]
        if gap > allowance:
            break
        allowance -= gap
        join[i] = True
    out: list[list[int]] = [list(merged[0])]
    for i, (a, b) in enumerate(merged[1:]):
        if join[i] and b - out[-1][0] <= MAX_COALESCED_BYTES:
            out[-1][1] = b
        else:
            out.append([a, b])
    return [(a, b - a) for a, b in out]


class RangeCache:
    """Ranges of remote objects in a `DiskCache` (see the module docstring). Thread-safe; state
    in memory is a per-process index of the ranges known on disk, rebuilt from the directory on
    a miss (another process may have fetched the range meanwhile).

    Example:
        >>> RangeCache(cache).read("http://s3:8333\\ns3://b/lake/video/p.parquet", ".parquet", 0, 4, fetch)
        b'PAR1'
    """

    def __init__(self, cache: DiskCache) -> None:
        self._cache = cache
        self._lock = threading.Lock()
        self._known: dict[str, list[tuple[int, int]]] = {}
        self._sizes: dict[str, int] = {}
        self._pid = os.getpid()

    def _forked(self) -> None:
        """A forked child starts with a fresh lock (the parent's may have been held at the fork)."""
        if self._pid != os.getpid():
            self._lock, self._pid = threading.Lock(), os.getpid()

    def _dir(self, digest: str) -> str:
        return os.path.join(self._cache.objects_directory, digest[:2])

    def _covering(self, digest: str, start: int, end: int) -> tuple[int, int] | None:
        with self._lock:
            for a, b in self._known.get(digest, ()):
                if a <= start and end <= b:
                    return a, b
        return None

    def _forget(self, digest: str, span: tuple[int, int]) -> None:
        with self._lock:
            spans = self._known.get(digest)
            if spans is not None and span in spans:
                spans.remove(span)

    def _remember(self, digest: str, span: tuple[int, int]) -> None:
        with self._lock:
            if digest not in self._known and len(self._known) >= _KNOWN_OBJECTS:
                self._known.pop(next(iter(self._known)))
            spans = self._known.setdefault(digest, [])
            if span not in spans:
                spans.append(span)
                spans.sort()

    def _rescan(self, digest: str) -> None:
        """Learn the ranges (and size) of `digest` other processes put in the cache."""
        prefix = digest + ".r"
        found: list[tuple[int, int]] = []
        try:
            with os.scandir(self._dir(digest)) as entries:
                for entry in entries:
                    name = entry.name
                    if name.startswith(prefix):
                        a, _, b = name[len(prefix) :].partition("-")
                        if a.isdigit() and b.isdigit() and int(a) < int(b):
                            found.append((int(a), int(b)))
                    elif name.startswith(digest + ".sz") and name[len(digest) + 3 :].isdigit():
                        with self._lock:
                            self._sizes[digest] = int(name[len(digest) + 3 :])
        except FileNotFoundError:
            pass
        with self._lock:
            self._known[digest] = sorted(set(found))

    def _read_entry(self, path: str, offset: int, size: int) -> bytes | None:
        """Bytes of the cached entry at `path`, its LRU clock set; None when it was evicted."""
        try:
            mark_used(Path(path))
            data = file_handles.pread(path, offset, size)
        except FileNotFoundError:
            return None
        self._cache.count_hit()
        _count("s3_range_hits")
        return data

    def read(
        self, key: str, suffix: str, offset: int, size: int, fetch: Callable[[int, int], bytes]
    ) -> bytes:
        """Bytes [offset, offset + size) of the object `key` (fewer at its end, as `pread`):
        from the whole cached object, a cached range that covers them, or `fetch(offset, size)`
        (kept as a range). Raises what `fetch` raises."""
        self._forked()
        digest = key_digest(key)
        end = offset + size
        for _ in range(2):  # a range evicted between the lookup and the read: look again
            span = self._covering(digest, offset, end)
            if span is None:
                break
            data = self._read_entry(self._entry_path(digest, span), offset - span[0], size)
            if data is not None:
                return data
            self._forget(digest, span)
        whole = os.path.join(self._dir(digest), digest + suffix)
        data = self._read_entry(whole, offset, size)
        if data is not None:
            return data
        with self._cache.stripe_lock(digest):  # two processes missing one range fetch it once
            self._rescan(digest)
            span = self._covering(digest, offset, end)
            if span is not None:
                data = self._read_entry(self._entry_path(digest, span), offset - span[0], size)
                if data is not None:
                    return data
            data = fetch(offset, size)
            _count("s3_fetched_bytes", len(data))
            _count("s3_range_requests")
            if data:
                span = (offset, offset + len(data))
                self._cache.put_bytes(os.path.basename(self._entry_path(digest, span)), data)
                self._remember(digest, span)
        return data

    def prefetch(
        self, key: str, suffix: str, spans: Sequence[tuple[int, int]], fetch: Callable[[int, int], bytes]
    ) -> None:
        """Fetch the (start, size) `spans` not cached yet, coalesced (`coalesce`) and up to
        PREFETCH_THREADS requests at once: the reads that follow are hits."""
        self._forked()
        digest = key_digest(key)
        if os.path.exists(os.path.join(self._dir(digest), digest + suffix)):
            return
        missing = [(a, n) for a, n in spans if n > 0 and self._covering(digest, a, a + n) is None]
        if not missing:
            return
        with self._cache.stripe_lock(digest):
            self._rescan(digest)
            missing = [(a, n) for a, n in missing if self._covering(digest, a, a + n) is None]
            plan = coalesce(missing)
            if len(plan) > 1:
                with ThreadPoolExecutor(min(PREFETCH_THREADS, len(plan))) as pool:
                    fetched = list(pool.map(lambda span: fetch(*span), plan))
            else:
                fetched = [fetch(*span) for span in plan]
            for (start, _), data in zip(plan, fetched, strict=True):
                _count("s3_fetched_bytes", len(data))
                _count("s3_range_requests")
                if data:
                    span = (start, start + len(data))
                    self._cache.put_bytes(os.path.basename(self._entry_path(digest, span)), data)
                    self._remember(digest, span)

    def object_size(self, key: str, head: Callable[[], int]) -> int:
        """The object's size: remembered, recorded in the cache (`.sz<size>`), or `head()`
        (then recorded)."""
        self._forked()
        digest = key_digest(key)
        with self._lock:
            size = self._sizes.get(digest)
        if size is None:
            self._rescan(digest)
            with self._lock:
                size = self._sizes.get(digest)
        if size is None:
            size = int(head())
            self._cache.put_bytes(f"{digest}.sz{size}", b"", fetched=False)
            with self._lock:
                self._sizes[digest] = size
        return size

    def _entry_path(self, digest: str, span: tuple[int, int]) -> str:
        return os.path.join(self._dir(digest), f"{digest}.r{span[0]}-{span[1]}")
