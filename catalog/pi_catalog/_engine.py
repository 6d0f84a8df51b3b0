"""The process's embedded chdb engine, kept open across Catalog calls and handed over on demand.

chdb runs one engine per process, and a chdb path can be open in one process at a time. Opening
and closing the engine around every call (what the catalog did first) costs more than the
~50 ms it takes: chdb 4.4 never stops the pool threads of a closed engine (~5 threads per
start, each keeping 3 /proc descriptors once it has run a task, so ~8-12 descriptors per call
until EMFILE), and an engine that lives for one statement never runs ClickHouse's background
merges or its cleanup of outdated parts, so every insert leaves a part directory behind and
each start loads all of them again (record time grows with the table).

So a process opens the engine once and keeps it, with the exclusive flock on `<path>.lock`,
for as long as no other process asks for the path. A process that wants the path while another
holds it announces itself with a shared flock on `<path>.lock.wait` while it waits; the holder
sees that after each of its operations, and from a watcher thread while idle (within
`_WATCH_S`), closes its engine and releases the lock. Its next call then waits its turn the
same way. Cross-process correctness is the flock's, as before: the engine is open only while
its process holds the lock.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import fcntl
import logging
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

from pi_catalog._connection import connect
from pi_catalog._errors import CatalogLockTimeout

log = logging.getLogger(__name__)

# How often an idle holder looks for a waiting process, and a waiter retries the lock.
_WATCH_S = 0.05
_LOCK_POLL_S = 0.02
# After handing the path to a waiting process, how long a side handle waits before it asks for
# the path again: several of the waiter's polls, so that it gets its turn.
_HANDOVER_S = 0.1
_BUSY = (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES)


class Engine:
    """One open chdb engine: its clickhouse-connect client and the flocks of its path.

    `ensured` remembers which schema statements ran on this engine (no other process can change
    the schema while it is open); `inserts` counts inserts for the part-count checks.
    """

    def __init__(self, path: str, client: Any, lock_fd: int, wait_fd: int) -> None:
        self.path = path
        self.client = client
        self.lock_fd = lock_fd
        self.wait_fd = wait_fd
        self.users = 0
        self.ensured: set[str] = set()
        self.inserts = 0
        # idle side handles (`side_handle`) by the settings they were prepared with
        self.side: dict[tuple[tuple[str, str], ...], list[Any]] = {}


_mutex = threading.RLock()
_current: Engine | None = None
_watcher: threading.Thread | None = None
# Clients inherited by a forked child: their engine is the parent's; never close them there.
_orphans: list[Any] = []


def wait_path(lock_path: str) -> str:
    """The file a waiting process holds a shared flock on."""
    return f"{lock_path}.wait"


def _try_lock(fd: int, mode: int) -> bool:
    try:
        fcntl.flock(fd, mode | fcntl.LOCK_NB)
    except OSError as err:
        if err.errno not in _BUSY:
            raise
        return False
    return True


def acquire_lock(lock_path: str, timeout_s: float) -> int:
    """An fd holding the exclusive flock on `lock_path`, announced on the wait file while it
    waits (so that an idle holder hands the path over), or CatalogLockTimeout."""
    os.makedirs(os.path.dirname(lock_path), exist_ok=True)
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if _try_lock(fd, fcntl.LOCK_EX):
            return fd
        wait_fd = os.open(wait_path(lock_path), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(wait_fd, fcntl.LOCK_SH)  # a holder only ever takes it for an instant
            deadline = time.monotonic() + timeout_s
            while not _try_lock(fd, fcntl.LOCK_EX):
                if time.monotonic() >= deadline:
                    raise CatalogLockTimeout(lock_path, timeout_s)
                time.sleep(_LOCK_POLL_S)
        finally:
            os.close(wait_fd)  # drops the shared flock: no longer waiting
    except BaseException:
        os.close(fd)
        raise
    return fd


def _others_waiting(engine: Engine) -> bool:
    if not _try_lock(engine.wait_fd, fcntl.LOCK_EX):
        return True  # some process holds a shared flock on the wait file
    fcntl.flock(engine.wait_fd, fcntl.LOCK_UN)
    return False


def _path_waited_for(lock_path: str) -> bool:
    """Whether a process announces on the wait file that it waits for the path."""
    try:
        fd = os.open(wait_path(lock_path), os.O_RDWR)
    except FileNotFoundError:
        return False
    try:
        if not _try_lock(fd, fcntl.LOCK_EX):
            return True
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def _open(path: str, location: str, timeout_s: float) -> Engine:
    global _current, _watcher
    lock_path = f"{path}.lock"
    lock_fd = acquire_lock(lock_path, timeout_s)
    try:
        wait_fd = os.open(wait_path(lock_path), os.O_RDWR | os.O_CREAT, 0o644)
    except BaseException:
        os.close(lock_fd)  # closing the only fd releases the flock
        raise
    try:
        client = connect(path, location)
    except BaseException:
        fcntl.flock(lock_fd, fcntl.LOCK_UN)
        os.close(lock_fd)
        os.close(wait_fd)
        raise
    _current = Engine(path, client, lock_fd, wait_fd)
    if _watcher is None:
        _watcher = threading.Thread(target=_watch, name="pi-catalog-handover", daemon=True)
        _watcher.start()
    return _current


def _close_current() -> None:
    """Close the engine and release its path (the caller holds `_mutex`)."""
    global _current
    engine, _current = _current, None
    if engine is None:
        return
    for handles in engine.side.values():
        for handle in handles:
            with contextlib.suppress(Exception):
                handle.close()
    engine.side.clear()
    try:
        engine.client.close()
    except Exception as err:  # nothing to do about it; the lock must go anyway
        log.warning("closing the chdb engine at %s failed: %s", engine.path, err)
    finally:
        fcntl.flock(engine.lock_fd, fcntl.LOCK_UN)
        os.close(engine.lock_fd)
        os.close(engine.wait_fd)


def _watch() -> None:
    global _watcher
    while True:
        time.sleep(_WATCH_S)
        if not _mutex.acquire(blocking=False):
            continue  # an operation runs; it looks for waiters itself when it ends
        try:
            engine = _current
            if engine is None:
                _watcher = None
                return
            if engine.users == 0 and _others_waiting(engine):
                log.debug("handing the chdb catalog at %s to a waiting process", engine.path)
                _close_current()
        finally:
            _mutex.release()


@contextlib.contextmanager
def embedded(path: str, location: str, timeout_s: float) -> Iterator[Engine]:
    """The process's engine on `path`, opened (under the lock) where it is not open yet; calls
    of this process are serialized on it.

    Example:
        >>> with embedded("/data/catalog", "/data/catalog", 60.0) as engine:
        ...     engine.client.query_arrow("SELECT 1")
    """
    with _mutex:
        engine = _current
        if engine is None or engine.path != path:
            _close_current()  # one engine per process: another path's goes first
            engine = _open(path, location, timeout_s)
        engine.users += 1
        try:
            yield engine
        finally:
            engine.users -= 1
            if engine.users == 0 and _current is engine and _others_waiting(engine):
                _close_current()


@contextlib.contextmanager
def side_handle(
    path: str, location: str, timeout_s: float, settings: tuple[tuple[str, str], ...]
) -> Iterator[Any]:
    """A chdb connection handle of its own on the process's engine, `SET` to `settings` in
    order, for reads that must neither wait for the process's other calls nor hold them up.

    chdb 4.x runs queries on separate handles of one engine in parallel (and releases the GIL
    meanwhile), and `SET` is per handle: a handle set to `readonly = 1` stays so, and leaves the
    engine's main client as it was. The handle counts as a user of the engine while it is held
    (the engine is not handed to another process under it) but holds no mutex: other calls of
    the process run beside it. A handle whose query failed is closed, not reused (chdb 4.4 hands
    a timed-out query's left-over output to the handle's next query); idle ones are kept for
    the next caller and closed with the engine.

    Example:
        >>> with side_handle("/data/catalog", "/data/catalog", 60.0, (("readonly", "1"),)) as h:
        ...     h.query("SELECT count() FROM episodes", "ArrowTable")
    """
    # Side handles may overlap without end (a page's users' queries), so the count of users
    # need never reach 0 for the usual handover: while another process waits for the path, a
    # new side handle waits (up to timeout_s) for the engine's users to finish and hands it
    # over first, then reopens it in its turn.
    deadline = time.monotonic() + timeout_s
    while True:
        pause = 0.0
        with _mutex:
            engine = _current
            if engine is not None and engine.path == path and _others_waiting(engine):
                if engine.users == 0:
                    _close_current()  # handed over; reopened once the waiter had its turn
                    pause = _HANDOVER_S
                elif time.monotonic() < deadline:
                    pause = _LOCK_POLL_S  # the users finish first
            elif (engine is None or engine.path != path) and _path_waited_for(f"{path}.lock"):
                pause = _LOCK_POLL_S  # closed for a waiting process: it goes first
            if not pause or time.monotonic() >= deadline:
                if engine is None or engine.path != path or _current is not engine:
                    _close_current()
                    engine = _open(path, location, timeout_s)
                engine.users += 1
                idle = engine.side.setdefault(settings, [])
                handle = idle.pop() if idle else None
                break
        time.sleep(pause)
    ok = False
    try:
        if handle is None:
            import chdb

            handle = chdb.connect(path)
            for name, value in settings:
                handle.query(f"SET {name} = {value}")
        yield handle
        ok = True
    finally:
        with _mutex:
            engine.users -= 1
            if handle is not None:
                if ok and _current is engine:
                    engine.side.setdefault(settings, []).append(handle)
                else:
                    with contextlib.suppress(Exception):
                        handle.close()
            if engine.users == 0 and _current is engine and _others_waiting(engine):
                _close_current()


def release(path: str | None = None) -> bool:
    """Close the process's engine (only if it is on `path`, when given) and release its lock.
    Returns whether one was closed. The next call opens it again.

    Example:
        >>> release("/data/catalog")
        True
    """
    with _mutex:
        engine = _current
        if engine is None or (path is not None and engine.path != path):
            return False
        if engine.users:
            raise RuntimeError(f"the catalog at {engine.path} is in use by this process (Catalog.held())")
        _close_current()
        return True


def _after_fork_in_child() -> None:
    # The engine and its threads stay with the parent: forget them without closing anything
    # that is shared (LOCK_UN on an inherited fd would release the parent's lock).
    global _mutex, _current, _watcher
    _mutex = threading.RLock()
    engine, _current, _watcher = _current, None, None
    if engine is not None:
        finalizer = getattr(getattr(engine.client, "_backend", None), "_release", None)
        if finalizer is not None and hasattr(finalizer, "detach"):
            finalizer.detach()  # clickhouse-connect would close the parent's handle at exit
        _orphans.append(engine.client)
        _orphans.extend(h for handles in engine.side.values() for h in handles)
        for fd in (engine.lock_fd, engine.wait_fd):
            with contextlib.suppress(OSError):
                os.close(fd)


def _close_at_exit() -> None:
    if _mutex.acquire(timeout=5.0):  # a thread stuck in an operation must not hang the exit
        try:
            _close_current()
        finally:
            _mutex.release()


os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(_close_at_exit)
