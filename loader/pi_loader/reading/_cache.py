"""A host-wide disk cache for files of remote (s3://) Delta tables, with LRU eviction.

Sits under `pi_loader`'s readers: a remote data file is downloaded once per host into
`CacheConfig.directory`, and every worker process of that host then opens the local copy. The
cache is shared by independent processes, so all of its state lives on disk
(`_cache_directory`: layout, locks, size accounting, eviction); this module is the read-through
protocol over it (hit, or fetch under a striped lock and publish) and the per-process counters.

Guarantees: completed entries never exceed `max_size_bytes` in total (downloads in flight are not
counted: at most one file per downloading thread on top). A file larger than `max_size_bytes`
raises `StorageError` before anything is downloaded (caching it would evict everything and still
break the limit). Entries are keyed by URI and assumed immutable, which holds for Delta data
files (every write adds new files with fresh names).

Readers and eviction: `get` returns the path of the most recently used entry, so it is the last
candidate for eviction; an entry is unlinked only under the lock, and on Linux a file that is
already open stays readable after its unlink. The remaining window, between `get` returning and
the caller opening the path, is lost only if other processes publish more than
`max_size_bytes` of new data in between; `open` closes that window by opening under the lock.
The directory must be on a local disk (fcntl locks and pids are per host).
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from pi_loader._errors import PiLoaderError
from pi_loader.reading._cache_directory import CacheDirectory, key_digest, mark_used


class StorageError(PiLoaderError):
    """Reading a remote file, or caching it on the local disk, failed.

    Example:
        >>> try:
        ...     storage.local_path("s3://bucket/lake/steps/part-0.parquet")
        ... except StorageError as err:
        ...     print(err)
    """


@dataclass(frozen=True, slots=True)
class CacheConfig:
    """Where remote lake files are cached on this host, and how much disk they may use.

    Args:
        directory: cache root on a local disk, shared by all worker processes of the host
            (created if missing). Use one directory per host, not a network share.
        max_size_bytes: limit on the total size of cached files; least-recently-used files are
            evicted to stay under it. A single file larger than this cannot be read (StorageError).

    Example:
        >>> CacheConfig(Path("/local/nvme/pi_cache"), max_size_bytes=200 * 2**30)
    """

    directory: Path
    max_size_bytes: int

    def __post_init__(self) -> None:
        if not isinstance(self.directory, str | Path):
            raise TypeError(f"directory must be a pathlib.Path or str, got {type(self.directory).__name__}")
        # Path("s3://b/c") collapses to "s3:/b/c", so look for a scheme in either spelling.
        if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:/", str(self.directory)):
            raise ValueError(f"directory must be a local path, got the URI {str(self.directory)!r}")
        object.__setattr__(self, "directory", Path(self.directory))
        if isinstance(self.max_size_bytes, bool) or not isinstance(self.max_size_bytes, int):
            raise TypeError(f"max_size_bytes must be an int, got {type(self.max_size_bytes).__name__}")
        if self.max_size_bytes <= 0:
            raise ValueError(f"max_size_bytes must be > 0, got {self.max_size_bytes}")


@dataclass(frozen=True, slots=True)
class CacheStats:
    """Counters of one process's use of a cache, plus the host-wide size when it was read.

    `hits` includes misses that found the file downloaded by another process while waiting for it.
    """

    hits: int
    misses: int
    evictions: int  # files this process evicted
    downloaded_bytes: int
    evicted_bytes: int
    size_bytes: int  # total size of cached files on the host
    max_size_bytes: int


class DiskCache:
    """A size-limited, LRU, multi-process disk cache of immutable files, keyed by string.

    Thread-safe and picklable (only the config travels; each process reopens the directory).

    Example:
        >>> cache = DiskCache(CacheConfig(Path("/tmp/c"), max_size_bytes=2**30))
        >>> path = cache.get("s3://b/x.parquet", size_bytes=123, fetch=download_to, suffix=".parquet")
    """

    def __init__(self, config: CacheConfig) -> None:
        if not isinstance(config, CacheConfig):
            raise TypeError(f"config must be a CacheConfig, got {type(config).__name__}")
        self._config = config
        self._directory = CacheDirectory(config.directory)
        self._reset()

    def _reset(self) -> None:
        self._pid = -1  # not opened in this process yet
        self._counter_lock = threading.Lock()
        self._open_lock = threading.Lock()
        self._hits = self._misses = self._evictions = 0
        self._downloaded_bytes = self._evicted_bytes = 0

    def __getstate__(self) -> dict[str, object]:
        return {"config": self._config}

    def __setstate__(self, state: dict[str, object]) -> None:
        config = state["config"]
        assert isinstance(config, CacheConfig)  # our own pickle format
        self._config = config
        self._directory = CacheDirectory(config.directory)
        self._reset()

    def __repr__(self) -> str:
        return f"DiskCache({self._config!r})"

    @property
    def config(self) -> CacheConfig:
        return self._config

    def _ensure_open(self) -> None:
        if self._pid == os.getpid():
            return
        with self._open_lock:
            if self._pid == os.getpid():
                return
            if self._pid != -1:  # forked: counters belong to the parent
                self._hits = self._misses = self._evictions = 0
                self._downloaded_bytes = self._evicted_bytes = 0
            try:
                self._directory.recover()
            except OSError as err:
                raise StorageError(
                    f"cannot use the cache directory {self._directory.root}: {err}; pass a writable local "
                    "directory in CacheConfig(directory=...)"
                ) from err
            self._pid = os.getpid()

    def _make_room(self, incoming_bytes: int) -> None:
        """Evict least-recently-used entries so that usage + incoming_bytes <= the limit
        (under the global lock)."""
        evicted, evicted_bytes = self._directory.make_room(incoming_bytes, self._config.max_size_bytes)
        with self._counter_lock:
            self._evictions += evicted
            self._evicted_bytes += evicted_bytes

    # -- public API ------------------------------------------------------------------------

    def get(
        self,
        key: str,
        *,
        size_bytes: int | Callable[[], int],
        fetch: Callable[[BinaryIO], None],
        suffix: str = "",
    ) -> str:
        """The local path of the cached file for `key`, fetching it on a miss.

        Args:
            key: identifies the (immutable) file, e.g. its URI plus endpoint.
            size_bytes: the file's size, or a function returning it (called on a miss only, so a
                hit costs no remote request); checked against the limit before fetching and
                against what `fetch` wrote.
            fetch: writes the file's bytes into the given binary file (called on a miss only).
            suffix: file name suffix of the cached copy (e.g. ".parquet").

        Raises:
            StorageError: the file is larger than max_size_bytes, `fetch` wrote a different
                number of bytes, or the cache directory is unusable.
        """
        path, _ = self._get(key, size_bytes=size_bytes, fetch=fetch, suffix=suffix, open_file=False)
        return path

    def open(
        self,
        key: str,
        *,
        size_bytes: int | Callable[[], int],
        fetch: Callable[[BinaryIO], None],
        suffix: str = "",
    ) -> BinaryIO:
        """Like `get`, but returns the cached file opened for reading, opened under the cache lock.

        Use it where the caller can take a file object: eviction cannot race with the open.
        """
        _, file = self._get(key, size_bytes=size_bytes, fetch=fetch, suffix=suffix, open_file=True)
        assert file is not None  # open_file=True
        return file

    def _get(
        self,
        key: str,
        *,
        size_bytes: int | Callable[[], int],
        fetch: Callable[[BinaryIO], None],
        suffix: str,
        open_file: bool,
    ) -> tuple[str, BinaryIO | None]:
        if "/" in suffix or "\x00" in suffix:
            raise ValueError(f"suffix must be a plain file name suffix, got {suffix!r}")
        self._ensure_open()
        digest = key_digest(key)
        path = self._directory.object_path(digest, suffix)
        found = self._touch(path, open_file)
        if found is not None:
            with self._counter_lock:
                self._hits += 1
            return found
        if callable(size_bytes):
            size_bytes = size_bytes()
        if isinstance(size_bytes, bool) or not isinstance(size_bytes, int) or size_bytes < 0:
            raise ValueError(f"size_bytes must be an int >= 0, got {size_bytes!r}")
        if size_bytes > self._config.max_size_bytes:
            raise StorageError(
                f"{key} is {size_bytes} bytes, larger than the whole cache (max_size_bytes="
                f"{self._config.max_size_bytes}); raise CacheConfig.max_size_bytes above the largest "
                "data file (or write smaller files: target_file_size when compacting)"
            )
        with self._directory.stripe_lock(digest):
            # Another process may have fetched it while this one waited for the stripe.
            found = self._touch(path, open_file)
            if found is not None:
                with self._counter_lock:
                    self._hits += 1
                return found
            tmp = self._directory.tmp_path(digest)
            try:
                with open(tmp, "wb") as out:
                    fetch(out)
                    out.flush()
                    # Data on disk before the rename, so a host crash cannot leave a
                    # complete-looking entry with missing bytes.
                    os.fsync(out.fileno())
                written = tmp.stat().st_size
                if written != size_bytes:
                    raise StorageError(
                        f"{key}: fetched {written} bytes, expected {size_bytes}; the transfer was cut "
                        "short or the object changed (Delta data files never change: is the URI right?)"
                    )
                path.parent.mkdir(exist_ok=True)
                with self._directory.global_lock():
                    self._make_room(written)
                    os.rename(tmp, path)
                    mark_used(path)
                    self._directory.write_usage(self._directory.read_usage() + written)
                    file = open(path, "rb") if open_file else None  # noqa: SIM115 (returned)
            except BaseException:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
                raise
        with self._counter_lock:
            self._misses += 1
            self._downloaded_bytes += written
        return str(path), file

    def put_bytes(self, name: str, data: bytes, *, fetched: bool = True) -> str:
        """Publish `data` as the cached entry `objects/<name[:2]>/<name>` (a byte range of a
        remote file: `_ranges`), evicting least-recently-used entries to stay under the limit,
        and count it as a miss of `len(data)` downloaded bytes. Returns its path.

        Raises:
            StorageError: `data` is larger than max_size_bytes.
        """
        if "/" in name or "\x00" in name or len(name) < 3:
            raise ValueError(f"an entry name is a plain file name, got {name!r}")
        if len(data) > self._config.max_size_bytes:
            raise StorageError(
                f"a range of {len(data)} bytes is larger than the whole cache (max_size_bytes="
                f"{self._config.max_size_bytes}); raise CacheConfig.max_size_bytes"
            )
        self._ensure_open()
        path = self._directory.root / "objects" / name[:2] / name
        tmp = self._directory.tmp_path(name[:64])
        try:
            with open(tmp, "wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            path.parent.mkdir(exist_ok=True)
            with self._directory.global_lock():
                self._make_room(len(data))
                os.rename(tmp, path)
                mark_used(path)
                self._directory.write_usage(self._directory.read_usage() + len(data))
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        if fetched:
            with self._counter_lock:
                self._misses += 1
                self._downloaded_bytes += len(data)
        return str(path)

    def stripe_lock(self, digest: str) -> contextlib.AbstractContextManager[None]:
        """The lock held while the entries of `digest` are fetched (one fetch per host)."""
        self._ensure_open()
        return self._directory.stripe_lock(digest)

    def count_hit(self) -> None:
        """Count a read served from a cached entry without `get` (a byte range: `_ranges`)."""
        with self._counter_lock:
            self._hits += 1

    @property
    def objects_directory(self) -> Path:
        """Where the cached entries are (`objects/<first two hex digits>/<name>`)."""
        self._ensure_open()
        return self._directory.root / "objects"

    def _touch(self, path: Path, open_file: bool) -> tuple[str, BinaryIO | None] | None:
        """Mark `path` used now, under the lock; None when it is not cached."""
        with self._directory.global_lock():
            try:
                mark_used(path)
            except FileNotFoundError:
                return None
            return str(path), (open(path, "rb") if open_file else None)

    def stats(self) -> CacheStats:
        """This process's counters and the host-wide cached size.

        Example:
            >>> cache.stats().hits
            12
        """
        self._ensure_open()
        with self._directory.global_lock():
            size = self._directory.read_usage()
        with self._counter_lock:
            return CacheStats(
                hits=self._hits,
                misses=self._misses,
                evictions=self._evictions,
                downloaded_bytes=self._downloaded_bytes,
                evicted_bytes=self._evicted_bytes,
                size_bytes=size,
                max_size_bytes=self._config.max_size_bytes,
            )

    def scan_size_bytes(self) -> int:
        """The total size of cached files, by listing the directory (the slow, exact answer)."""
        self._ensure_open()
        with self._directory.global_lock():
            return sum(e.size_bytes for e in self._directory.scan())
