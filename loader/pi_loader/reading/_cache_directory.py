"""The on-disk state of a `DiskCache`: its directory layout, locks, size accounting and eviction.

The cache is shared by independent processes, so all of its state lives on disk:

* `objects/<xx>/<sha256><suffix>`: the cached files. A file's mtime is its last use (set on every
  hit), which is the LRU clock; mtime rather than atime because disks are often mounted noatime.
* `usage`: the total size of `objects/` in bytes, so a miss need not list the directory. It is
  rebuilt from a scan of `objects/` when a process first opens the cache (so it survives
  restarts and crashes) and on every eviction.
* `tmp/`: downloads in flight (`<sha256>.<pid>.<thread>.tmp`); renamed into `objects/` when
  complete, so a reader never sees a partial file. Leftovers of dead processes are removed on open.
* `.lock`: an fcntl lock around every change of `objects/` and `usage` (hits, publish, eviction).
  `locks/NN`: striped locks held while a key downloads, so two processes that miss the same
  file at once download it once (the second waits, then hits).

The directory must be on a local disk (fcntl locks and pids are per host).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

# Striped download locks: enough stripes that unrelated downloads rarely wait on each other,
# few enough that the lock files never need cleaning up.
_LOCK_STRIPES = 64
# On eviction, free down to this fraction of the limit (plus room for the new file), so that a
# full cache does not rescan its directory on every miss.
_EVICT_TO_FRACTION = 0.9
# A tmp file of a live pid is left alone unless it is this old (a reused pid, or a hung download).
_STALE_TMP_AGE_S = 24 * 3600.0


@dataclass(frozen=True, slots=True)
class _Entry:
    path: str
    size_bytes: int
    last_used_ns: int


def key_digest(key: str) -> str:
    """The name a cache key's file is stored under (hex sha256)."""
    return hashlib.sha256(key.encode()).hexdigest()


class CacheDirectory:
    """Paths, locks and the `usage` accounting of one cache directory; no state in memory.

    Methods marked "under the global lock" must be called inside `global_lock()`.

    Example:
        >>> directory = CacheDirectory(Path("/local/nvme/pi_cache"))
        >>> directory.recover()
        >>> with directory.global_lock():
        ...     directory.read_usage()
    """

    def __init__(self, root: Path) -> None:
        self.root = root

    # -- paths and locks -------------------------------------------------------------------

    def object_path(self, digest: str, suffix: str) -> Path:
        return self.root / "objects" / digest[:2] / f"{digest}{suffix}"

    def tmp_path(self, digest: str) -> Path:
        """Where this thread downloads `digest`; the pid in the name lets `recover` tell
        downloads of dead processes."""
        return self.root / "tmp" / f"{digest}.{os.getpid()}.{threading.get_ident()}.tmp"

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

    def global_lock(self) -> contextlib.AbstractContextManager[None]:
        return self._flock(self.root / ".lock")

    def stripe_lock(self, digest: str) -> contextlib.AbstractContextManager[None]:
        return self._flock(self.root / "locks" / f"{int(digest[:8], 16) % _LOCK_STRIPES:02d}")

    def recover(self) -> None:
        """Create the directory, remove downloads of dead processes and rebuild `usage` from a
        scan (what a process does when it first opens the cache).

        Raises:
            OSError: the directory cannot be created or written.
        """
        for sub in ("objects", "tmp", "locks"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        with self.global_lock():
            self._remove_stale_tmp()
            self.write_usage(sum(e.size_bytes for e in self.scan()))

    # -- on-disk accounting (call under the global lock) -----------------------------------

    def scan(self) -> list[_Entry]:
        entries: list[_Entry] = []
        objects = self.root / "objects"
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

    def read_usage(self) -> int:
        try:
            return int((self.root / "usage").read_text())
        except (FileNotFoundError, ValueError):
            # Missing or torn by a crash: the directory itself is the truth.
            total = sum(e.size_bytes for e in self.scan())
            self.write_usage(total)
            return total

    def write_usage(self, total_bytes: int) -> None:
        (self.root / "usage").write_text(str(total_bytes))

    def _remove_stale_tmp(self) -> None:
        now = time.time()
        for item in os.scandir(self.root / "tmp"):
            parts = item.name.split(".")
            pid = int(parts[1]) if len(parts) >= 3 and parts[1].isdigit() else -1
            try:
                age_s = now - item.stat().st_mtime
                if pid != os.getpid() and (not _pid_alive(pid) or age_s > _STALE_TMP_AGE_S):
                    os.unlink(item.path)
            except FileNotFoundError:
                continue

    def make_room(self, incoming_bytes: int, limit_bytes: int) -> tuple[int, int]:
        """Evict least-recently-used entries so that usage + incoming_bytes <= limit_bytes.

        Returns:
            (files evicted, bytes evicted).
        """
        if self.read_usage() + incoming_bytes <= limit_bytes:
            return 0, 0
        entries = sorted(self.scan(), key=lambda e: (e.last_used_ns, e.path))
        total = sum(e.size_bytes for e in entries)
        target = int(limit_bytes * _EVICT_TO_FRACTION) - incoming_bytes
        if target < 0:  # a file of more than the low-water mark: keep what still fits beside it
            target = limit_bytes - incoming_bytes
        evicted = evicted_bytes = 0
        for entry in entries:
            if total <= target:
                break
            with contextlib.suppress(FileNotFoundError):
                os.unlink(entry.path)
            total -= entry.size_bytes
            evicted += 1
            evicted_bytes += entry.size_bytes
        self.write_usage(total)
        return evicted, evicted_bytes


def mark_used(path: Path) -> None:
    """Set `path`'s LRU clock (its mtime) to now."""
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
