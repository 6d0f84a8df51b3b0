"""One maintenance operation (compaction, GC, catalog-independent deletes) at a time per lake.

Compaction and GC both rewrite file groups; Delta's conflict check already refuses a commit
that removes a file another commit removed, but one of them would then have committed its steps
and video rewrites without its markers (harmless: GC removes the orphans), and GC's file
deletion must not run in the window between a rewrite's first and last commit. A file lock beside
a local lake serialises them; on object stores run one maintenance job at a time (a cron job or
a Kubernetes CronJob with concurrencyPolicy Forbid, deploy/).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator

from pi_format import LakeLayout

from pi_jobs.errors import PiJobsError

LOCK_NAME = "_pilake_maintenance.lock"


class MaintenanceBusyError(PiJobsError):
    """Another compaction or GC holds the lake's maintenance lock."""


@contextlib.contextmanager
def maintenance_lock(layout: LakeLayout, operation: str) -> Iterator[None]:
    """Hold the lake's maintenance lock for `operation` (local lakes; a no-op elsewhere).

    Raises:
        MaintenanceBusyError: another process holds it (the message names its operation and pid).

    Example:
        >>> with maintenance_lock(LakeLayout("/data/lake"), "gc"):
        ...     run_gc(...)
    """
    if "://" in layout.root:
        yield
        return
    os.makedirs(layout.root, exist_ok=True)
    path = os.path.join(layout.root, LOCK_NAME)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as err:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "unknown"
            raise MaintenanceBusyError(
                f"cannot run {operation}: another maintenance operation holds {path} ({holder}); "
                "wait for it to finish (compaction and GC run one at a time per lake)"
            ) from err
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{operation} pid {os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # closing releases the flock
