"""Riding out a dependency's restart inside the sink: retries with back-off for transient errors.

The lake's object store and the catalog server restart (an upgrade, a node drain) more often than
they break. Failing the Flink task on the first refused connection costs a job restart each time
(a restore, a re-read from the last checkpoint) and, with a bounded restart strategy, the job
itself after a few: so the sink retries an operation that failed because its server was
unreachable or overloaded, with exponential back-off, for up to `retry_s` seconds, and only then
lets the error fail the task; each retry and each final failure is counted
(pilake_stream_dependency_retries_total / _failures_total, by operation). Errors that
retrying cannot fix (a permission refused, a schema mismatch, a bad value) fail at once. A
retried lake commit is safe: the writer re-reads the lake and commits only what is not committed
yet (decision 3), as after a restart.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

log = logging.getLogger("pi_jobs.stream")
T = TypeVar("T")

# Substrings of the messages that an unreachable or overloaded server gives (delta-rs/object_store,
# pyarrow's S3 filesystem, botocore, urllib3 under clickhouse-connect, the OS). Lower case.
_TRANSIENT = (
    "connection refused",
    "connection reset",
    "connection aborted",
    "connection closed",
    "broken pipe",
    "timed out",
    "timeout",
    "error sending request",
    "failed to connect",
    "couldn't connect",
    "could not connect",
    "network_connection",  # pyarrow's S3 client (AWS C++ SDK): "AWS Error NETWORK_CONNECTION"
    "service_unavailable",
    "slow_down",
    "request_timeout",
    "connecterror",
    "max retries exceeded",
    "service unavailable",
    "slow down",
    "slowdown",
    "internalerror",
    "502 bad gateway",
    "504 gateway",
    "temporarily unavailable",
    "name or service not known",
    "network is unreachable",
    "no route to host",
)
# ... unless the message says the request reached a server that refused it for good.
_PERMANENT = (
    "permission denied",
    "access denied",
    "accessdenied",
    "forbidden",
    "authentication",
    "unauthorized",
)


def is_transient(err: BaseException) -> bool:
    """Did `err` (or an error it wraps) come from a server that was unreachable or overloaded?

    Example:
        >>> is_transient(OSError("Generic S3 error: error sending request: Connection refused"))
        True
    """
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ConnectionError | TimeoutError):
            return True
        text = f"{type(current).__name__}: {current}".lower()
        if any(p in text for p in _PERMANENT):
            return False
        if any(t in text for t in _TRANSIENT):
            return True
        current = current.__cause__ or current.__context__
    return False


def _count(what: str, *, failed: bool) -> None:
    """Count the attempt in the worker's metrics (pilake_stream_dependency_retries_total /
    _failures_total); counting never fails the operation."""
    try:
        from pi_jobs.stream import _metrics

        _metrics.record_dependency(what, failed=failed)
    except Exception as err:  # pragma: no cover - a metrics bug must not fail a commit
        log.debug("dependency metrics: %s", err)


def with_retries(
    what: str,
    attempt: Callable[[], T],
    *,
    retry_s: float,
    before_retry: Callable[[], None] | None = None,
    initial_delay_s: float = 0.5,
    max_delay_s: float = 8.0,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """`attempt()`, again after transient failures (back-off doubling from `initial_delay_s` to
    `max_delay_s`) until `retry_s` seconds have passed; `before_retry()` runs before each retry
    (e.g. reopen a client). The last error is raised when time runs out or it is not transient.

    Example:
        >>> with_retries("lake commit", lambda: writer.commit_episodes(group), retry_s=120)
    """
    deadline = time.monotonic() + retry_s
    delay = initial_delay_s
    failures = 0
    while True:
        try:
            result = attempt()
        except Exception as err:
            if not is_transient(err) or time.monotonic() + delay > deadline:
                _count(what, failed=True)
                raise
            failures += 1
            _count(what, failed=False)
            log.warning("%s failed (%s); retry %d in %.1f s", what, str(err)[:300], failures, delay)
            sleep(delay)
            delay = min(delay * 2, max_delay_s)
            if before_retry is not None:
                try:
                    before_retry()
                except Exception as again:  # the next attempt reports what is still wrong
                    log.warning("%s: reopening failed (%s)", what, str(again)[:300])
            continue
        if failures:
            log.warning("%s succeeded after %d retries", what, failures)
        return result
