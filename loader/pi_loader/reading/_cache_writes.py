"""The host cache files an open writes, written beside the rest of the open instead of before it.

A cold open of a large lake writes two host-local copies of what it read: the episodes-rows
segment (`_episodes_rows`) and the open-cache entry (`_open_cache`), ~760 MB each at 1,000,000
episodes. Written in line they cost 3.6 s of a 19 s cold open (profiled on the million-episode
lake, docs/read-at-scale.md); nothing of the open needs them, only the next open does. So each
one of at least BACKGROUND_BYTES is handed to `write_later`: one non-daemon thread per write (the
interpreter waits for it at exit, so an entry is finished, or its temporary file removed, before
the process ends), and `settle(directory)` joins the writes into a directory before anything
reads it, so a second open in the same process finds what the first wrote. The Arrow IPC
writes, the CRC and the fsync release the GIL: on this 2-core host they overlap the open's
Python work.

A write that fails (a full or read-only disk, an unexpected error) costs only the cache entry:
its error is logged, its temporary file removed by the writer, and the next open reads the lake.
A forked child forgets its parent's pending writes (their threads do not exist in it).

Example:
    >>> write_soon(directory, rows.get_total_buffer_size(), lambda: save_entry(directory, rows))
    >>> settle(directory)  # before reading directory
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path

__all__ = ["BACKGROUND_BYTES", "pending_writes", "settle", "write_later", "write_soon"]

# Rows at least this large are written in the background; smaller ones in line (a few ms: not
# worth a thread, and the files are there when the open returns, as before).
BACKGROUND_BYTES = 64 << 20

_log = logging.getLogger("pi_loader")
_lock = threading.Lock()
_pending: dict[str, list[threading.Thread]] = {}


def _key(directory: Path) -> str:
    return os.path.abspath(directory)


def write_later(directory: Path, write: Callable[[], object]) -> None:
    """Run `write` (which writes into `directory`) in its own thread; returns at once."""

    def run() -> None:
        try:
            write()
        except Exception:  # a cache: the open that asked already has its rows
            _log.warning(
                "a host cache write into %s failed; the next open reads the lake", directory, exc_info=True
            )

    thread = threading.Thread(target=run, name="pi-loader-cache-write", daemon=False)
    with _lock:
        alive = [t for t in _pending.get(_key(directory), []) if t.is_alive()]
        _pending[_key(directory)] = [*alive, thread]
    thread.start()


def write_soon(directory: Path, nbytes: int, write: Callable[[], object]) -> None:
    """`write` in line when `nbytes` < BACKGROUND_BYTES, else `write_later`."""
    if nbytes < BACKGROUND_BYTES:
        write()
    else:
        write_later(directory, write)


def settle(directory: Path) -> None:
    """Wait for this process's pending writes into `directory` (none: returns at once)."""
    with _lock:
        threads = _pending.pop(_key(directory), [])
    for thread in threads:
        thread.join()


def pending_writes() -> int:
    """This process's cache writes still running (all directories)."""
    with _lock:
        return sum(t.is_alive() for threads in _pending.values() for t in threads)


def _forget_in_child() -> None:
    global _lock
    _lock = threading.Lock()  # the parent may have held it at fork
    _pending.clear()


os.register_at_fork(after_in_child=_forget_in_child)
