"""How loader worker processes start: from a preloaded forkserver, warmed while a Dataset opens.

A spawned worker starts a fresh interpreter and imports numpy, pyarrow, PyAV and pi_loader
before its first batch (~1 s each, all of them at once on the first iteration), after the
Dataset has opened: the first batch waited for both in turn (issue 23: 4.2-6.5 s from process
start). A forkserver started with those modules preloaded is a clean single-threaded process
(safe to fork, unlike a main process running CUDA or JAX threads), and it is started when the
first Dataset opens, so its imports overlap the open; each worker is then a fork of it.

Outside the rooms on purpose: the samples room (Dataset) warms it and the delivery room
(Loader) uses it, and neither may import the other's direction.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import threading
from typing import Any

# What a worker needs before its first batch; imported once, in the forkserver.
PRELOAD = (
    "numpy",
    "pyarrow",
    "pyarrow.parquet",
    "av",
    "zstandard",
    "pi_loader",
    "pi_loader.delivery._workers",
)
FORKSERVER = "forkserver"
# Set to 0 to not start the forkserver when a Dataset opens (it then starts at the first batch).
WARM_ENV = "PILAKE_LOADER_WARM_FORKSERVER"

_lock = threading.Lock()
_tempdir_lock = threading.Lock()
_configured = False
# sun_path of struct sockaddr_un on Linux (108 bytes with the terminating NUL)
_AF_UNIX_PATH_MAX = 107


def default_start_method() -> str:
    """ "forkserver" where the platform has it (Linux, macOS), else "spawn"."""
    return FORKSERVER if FORKSERVER in multiprocessing.get_all_start_methods() else "spawn"


def _drop_stale_forkserver() -> None:
    """Forget a forkserver whose socket was deleted (its temp dir removed under it, as test
    runners and tmp cleaners do): the next start launches a fresh one instead of failing to
    connect. Uses multiprocessing's private state; any surprise leaves it as it was."""
    from multiprocessing import forkserver, process, util

    try:
        config: Any = getattr(process.current_process(), "_config")  # noqa: B009 - private on purpose
        tempdir = config.get("tempdir")
        if tempdir is not None and not os.path.isdir(tempdir):
            config.pop("tempdir", None)  # made again on demand
        server: Any = getattr(forkserver, "_forkserver")  # noqa: B009
        address = server._forkserver_address
        if (
            server._forkserver_pid is None
            or not address
            or util.is_abstract_socket_namespace(address)
            or os.path.exists(address)
        ):
            return
        with server._lock:
            os.close(server._forkserver_alive_fd)  # asks the old server to exit
            old_pid = server._forkserver_pid
            server._forkserver_alive_fd = None
            server._forkserver_pid = None
            server._forkserver_address = None
        # The old server exits once the last worker it forked has exited (each holds the alive
        # pipe too): reaped in the background, never waited for here. Waiting hung a process
        # whose earlier Loader still had a live worker (a CI run, 2026-11-26).
        threading.Thread(target=_reap, args=(old_pid,), name="forkserver-reaper", daemon=True).start()
    except (AttributeError, OSError):
        return


def _short_socket_dir() -> None:
    """Put multiprocessing's temp dir (where the forkserver's socket lives) under /tmp when the
    user's temp dir is too long for a Unix socket path (107 bytes on Linux): with $TMPDIR on a
    deep path (an HPC job's scratch dir, a test runner's tmp) the forkserver failed to start
    with "AF_UNIX path too long". Python 3.11 has no fallback of its own."""
    import tempfile
    from multiprocessing import process, util

    config: Any = getattr(process.current_process(), "_config")  # noqa: B009 - private on purpose
    if config.get("tempdir") is not None:
        return
    # <tempdir>/pymp-XXXXXXXX/listener-XXXXXXXX: 33 bytes more than the temp dir itself
    if len(os.fsencode(tempfile.gettempdir())) + 33 < _AF_UNIX_PATH_MAX or not os.access("/tmp", os.W_OK):
        return
    with _tempdir_lock:
        saved = tempfile.tempdir
        tempfile.tempdir = "/tmp"
        try:
            util.get_temp_dir()  # made now, under /tmp, and removed at exit as usual
        finally:
            tempfile.tempdir = saved


def _reap(pid: int) -> None:
    with contextlib.suppress(OSError):  # already reaped
        os.waitpid(pid, 0)


def context(method: str) -> multiprocessing.context.BaseContext:
    """The multiprocessing context for `method`; a forkserver one preloads `PRELOAD`."""
    global _configured
    ctx = multiprocessing.get_context(method)
    if method == FORKSERVER:
        _drop_stale_forkserver()
        _short_socket_dir()
        with _lock:
            if not _configured:
                # Only effective before the server starts; the list replaces '__main__', so
                # workers never re-import the user's script.
                ctx.set_forkserver_preload(list(PRELOAD))
                _configured = True
    return ctx


def warm_forkserver() -> bool:
    """Start the preloaded forkserver now (returns at once; it imports in its own process).

    Called when a Dataset opens in a main process, so the worker start-up overlaps the open.
    Does nothing in a child process, where forkserver is unavailable, or with
    PILAKE_LOADER_WARM_FORKSERVER=0. Returns whether a server is (now) running.

    Example:
        >>> warm_forkserver()
        True
    """
    if os.environ.get(WARM_ENV, "1") == "0" or default_start_method() != FORKSERVER:
        return False
    if multiprocessing.parent_process() is not None:
        return False
    context(FORKSERVER)
    from multiprocessing import forkserver

    try:
        forkserver.ensure_running()
    except OSError:
        return False
    return True
