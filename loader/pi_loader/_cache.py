"""A host-wide disk cache for files of remote (s3://) Delta tables, with LRU eviction.

Sits under `pi_loader`'s readers: a remote data file is downloaded once per host into
`CacheConfig.directory`, and every worker process of that host then opens the local copy. The
cache is shared by independent processes, so all of its state lives on disk:

* `objects/<xx>/<sha256><suffix>`: the cached files. A file's mtime is its last use (set on every
  hit), which is the LRU clock; mtime rather than atime because disks are often mounted noatime.
* `usage`: the total size of `objects/` in bytes, so a miss need not list the directory. It is
  rebuilt from a scan of `objects/` when a process first opens the cache (so it survives
  restarts and crashes) and on every eviction.
* `tmp/`: downloads in flight (`<sha256>.<pid>.tmp`); renamed into `objects/` when complete, so
  a reader never sees a partial file. Leftovers of dead processes are removed on open.
* `.lock`: an fcntl lock around every change of `objects/` and `usage` (hits, publish, eviction).
  `locks/NN`: striped locks held while a key downloads, so two processes that miss the same
  file at once download it once (the second waits, then hits).

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
import fcntl
import hashlib
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from pi_loader._errors import PiLoaderError

# Striped download locks: enough stripes that unrelated downloads rarely wait on each other,
# few enough that the lock files never need cleaning up.
_LOCK_STRIPES = 64
# On eviction, free down to this fraction of the limit (plus room for the new file), so that a
# full cache does not rescan its directory on every miss.
_EVICT_TO_FRACTION = 0.9
# A tmp file of a live pid is left alone unless it is this old (a reused pid, or a hung download).
_STALE_TMP_AGE_S = 24 * 3600.0


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


@dataclass(frozen=True, slots=True)
class _Entry:
    path: str
    size_bytes: int
    last_used_ns: int


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
        self._reset()

    def __repr__(self) -> str:
        return f"DiskCache({self._config!r})"

    @property
    def config(self) -> CacheConfig:
        return self._config

    # -- paths and locks -------------------------------------------------------------------

    @property
    def _root(self) -> Path:
        return self._config.directory

    def _digest(self, key: str) -> str:
        return hashlib.sha256(key.encode()).hexdigest()

    def _object_path(self, digest: str, suffix: str) -> Path:
        return self._root / "objects" / digest[:2] / f"{digest}{suffix}"

    @contextlib.contextmanager
    def _flock(self, path: Path) -> Iterator[None]:
        # A fresh open file description per acquisition: flock then excludes other threads of
        # this process too, and a forked child never inherits a held lock.
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the lock

    def _global_lock(self) -> contextlib.AbstractContextManager[None]:
        return self._flock(self._root / ".lock")

    def _stripe_lock(self, digest: str) -> contextlib.AbstractContextManager[None]:
        return self._flock(self._root / "locks" / f"{int(digest[:8], 16) % _LOCK_STRIPES:02d}")

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
                for sub in ("objects", "tmp", "locks"):
                    (self._root / sub).mkdir(parents=True, exist_ok=True)
                with self._global_lock():
                    self._remove_stale_tmp()
                    self._write_usage(sum(e.size_bytes for e in self._scan()))
            except OSError as err:
                raise StorageError(
                    f"cannot use the cache directory {self._root}: {err}; pass a writable local "
                    "directory in CacheConfig(directory=...)"
                ) from err
            self._pid = os.getpid()

    # -- on-disk accounting (call under the global lock) -----------------------------------

    def _scan(self) -> list[_Entry]:
        entries: list[_Entry] = []
        objects = self._root / "objects"
        for sub in os.scandir(objects):
            if not sub.is_dir(follow_symlinks=False):
                continue
            for item in os.scandir(sub.path):
                try:
                    st = item.stat(follow_symlinks=False)
                except FileNotFoundError:  # removed by hand while scanning
                    continue
                entries.append(_Entry(item.path, st.st_size, st.st_mtime_ns))
        return entries

    def _read_usage(self) -> int:
        try:
            return int((self._root / "usage").read_text())
        except (FileNotFoundError, ValueError):
            # Missing or torn by a crash: the directory itself is the truth.
            total = sum(e.size_bytes for e in self._scan())
            self._write_usage(total)
            return total

    def _write_usage(self, total_bytes: int) -> None:
        (self._root / "usage").write_text(str(total_bytes))

    def _remove_stale_tmp(self) -> None:
        now = time.time()
        for item in os.scandir(self._root / "tmp"):
            parts = item.name.split(".")
            pid = int(parts[1]) if len(parts) >= 3 and parts[1].isdigit() else -1
            try:
                age_s = now - item.stat().st_mtime
                if pid != os.getpid() and (not _pid_alive(pid) or age_s > _STALE_TMP_AGE_S):
                    os.unlink(item.path)
            except FileNotFoundError:
                continue

    def _make_room(self, incoming_bytes: int) -> None:
        """Evict least-recently-used entries so that usage + incoming_bytes <= the limit."""
        limit = self._config.max_size_bytes
        if self._read_usage() + incoming_bytes <= limit:
            return
        entries = sorted(self._scan(), key=lambda e: (e.last_used_ns, e.path))
        total = sum(e.size_bytes for e in entries)
        target = int(limit * _EVICT_TO_FRACTION) - incoming_bytes
        if target < 0:  # a file of more than the low-water mark: keep what still fits beside it
            target = limit - incoming_bytes
        evicted = evicted_bytes = 0
        for entry in entries:
            if total <= target:
                break
            with contextlib.suppress(FileNotFoundError):
                os.unlink(entry.path)
            total -= entry.size_bytes
            evicted += 1
            evicted_bytes += entry.size_bytes
        self._write_usage(total)
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
        digest = self._digest(key)
        path = self._object_path(digest, suffix)
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
        with self._stripe_lock(digest):
            # Another process may have fetched it while this one waited for the stripe.
            found = self._touch(path, open_file)
            if found is not None:
                with self._counter_lock:
                    self._hits += 1
                return found
            tmp = self._root / "tmp" / f"{digest}.{os.getpid()}.{threading.get_ident()}.tmp"
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
                with self._global_lock():
                    self._make_room(written)
                    os.rename(tmp, path)
                    _mark_used(path)
                    self._write_usage(self._read_usage() + written)
                    file = open(path, "rb") if open_file else None  # noqa: SIM115 (returned)
            except BaseException:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
                raise
        with self._counter_lock:
            self._misses += 1
            self._downloaded_bytes += written
        return str(path), file

    def _touch(self, path: Path, open_file: bool) -> tuple[str, BinaryIO | None] | None:
        """Mark `path` used now, under the lock; None when it is not cached."""
        with self._global_lock():
            try:
                _mark_used(path)
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
        with self._global_lock():
            size = self._read_usage()
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
        with self._global_lock():
            return sum(e.size_bytes for e in self._scan())


def _mark_used(path: Path) -> None:
    # An explicit fine-grained clock: a plain utime() takes the kernel's coarse file time (ticks
    # of several ms), which would tie files used in quick succession and blur the LRU order.
    now_ns = time.time_ns()
    os.utime(path, ns=(now_ns, now_ns))


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True
