"""One maintenance operation (compaction, GC, catalog-independent deletes) at a time per lake.

Compaction and GC both rewrite file groups; Delta's conflict check already refuses a commit
that removes a file another commit removed, but one of them would then have committed its steps
and video rewrites without its markers (harmless: GC removes the orphans), and GC's file
deletion must not run in the window between a rewrite's first and last commit. A file lock beside
a local lake serialises them on one host; a lake on object storage (s3://) is guarded by a lease
object written with conditional PUTs (pi_jobs.maintenance._lease), which serialises them across
hosts (the Kubernetes CronJob's concurrencyPolicy Forbid only keeps one CronJob's runs apart, not
a `pilake gc` started by hand).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
from collections.abc import Iterator

from pi_format import LakeLayout

from pi_jobs.errors import PiJobsError
from pi_jobs.maintenance._lease import DEFAULT_LEASE_TTL_S, MaintenanceBusyError, S3Lease

LOCK_NAME = "_pilake_maintenance.lock"
log = logging.getLogger("pi_jobs.maintenance")


class HeldLock:
    """What `maintenance_lock` yields: `ensure_held()` before an irreversible step (GC's file
    deletes) raises MaintenanceLeaseLostError if an object-store lease was lost meanwhile."""

    def __init__(self, lease: S3Lease | None = None) -> None:
        self._lease = lease

    def ensure_held(self) -> None:
        if self._lease is not None:
            self._lease.ensure_held()


@contextlib.contextmanager
def maintenance_lock(
    layout: LakeLayout, operation: str, *, lease_ttl_s: float = DEFAULT_LEASE_TTL_S
) -> Iterator[HeldLock]:
    """Hold the lake's maintenance lock for `operation`: a file lock beside a local lake, a
    lease object on an s3:// lake (`lease_ttl_s`: how long a holder that stops renewing blocks
    others).

    Raises:
        MaintenanceBusyError: another process holds it (the message names its operation and pid).
        MaintenanceLeaseLostError: (s3) another process took the lease over while this one ran.
        PiJobsError: the lake is on an object store other than S3 (no lock known for it).

    Example:
        >>> with maintenance_lock(LakeLayout("/data/lake"), "gc") as lock:
        ...     plan = plan_gc(...); lock.ensure_held(); delete_files(plan)
    """
    if "://" in layout.root:
        scheme = layout.root.split("://", 1)[0]
        if scheme not in ("s3", "s3a"):
            raise PiJobsError(
                f"no maintenance lock for a {scheme}:// lake: compaction and GC need a local path or "
                "s3:// (conditional PUT leases)"
            )
        lease = S3Lease(layout.root, operation, ttl_s=lease_ttl_s)
        lease.acquire()
        try:
            yield HeldLock(lease)
        except BaseException:
            try:
                lease.release()
            except PiJobsError as err:  # the operation's own error is the one to see
                log.warning("%s", err)
            raise
        lease.release()
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
        yield HeldLock()
    finally:
        os.close(fd)  # closing releases the flock
