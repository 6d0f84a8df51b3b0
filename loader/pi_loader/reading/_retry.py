"""Retries of object-store reads: exponential backoff with full jitter under an overall deadline.

Every read the loader makes from an s3:// lake (a data file's HEAD and GET, the Delta log that
deltalake loads at open) goes through `retrying`. A transient failure (connection refused or
reset, a timeout, HTTP 5xx, throttling) is tried again after a backoff; a permanent one (403,
404, a bad signature, a size or checksum mismatch) is not, and says what to do. When the
deadline passes, `StoreUnreachableError` names the endpoint, the deadline and the last error:
a store that stays down costs at most `RetryConfig.deadline_s`, never a hang.

Counts are per process (`retry_counts`), summed over the loader's workers through
`Dataset.read_stats` and exported as `pilake_loader_storage_retries_total` and
`pilake_loader_storage_giveups_total` (pi_loader.delivery._metrics).

Example:
    >>> config = RetryConfig(deadline_s=30.0)
    >>> size = retrying(lambda: fs.get_file_info(path).size, what=f"stat {uri}",
    ...                 endpoint="http://seaweedfs:8333", config=config)
"""

from __future__ import annotations

import random
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from pi_loader.reading._cache import StorageError

__all__ = [
    "PermanentStorageError",
    "RetryConfig",
    "StoreUnreachableError",
    "classify",
    "retry_counts",
    "retrying",
]

T = TypeVar("T")


class StoreUnreachableError(StorageError):
    """The object store kept failing with transient errors until the retry deadline passed."""


class PermanentStorageError(StorageError):
    """The object store refused a read for a reason retrying cannot fix (403, bad credentials,
    a body of the wrong size)."""


@dataclass(frozen=True, slots=True)
class RetryConfig:
    """How object-store reads are retried.

    Args:
        deadline_s: no try starts after this long (the first try included), so a read fails
            within deadline_s plus one try's timeout at most. 60 s rides out a
            store restart or a load balancer failover (SeaweedFS restarts in ~2-5 s, an S3
            503 SlowDown burst lasts seconds) and still fails a training job fast enough to
            page someone rather than stall it.
        initial_backoff_s: the first wait (0.1 s: a dropped connection usually works at once).
        max_backoff_s: the cap on one wait (4 s: sleeping longer than that only adds latency
            after the store is back).
        multiplier: backoff growth per try (2: the usual exponential backoff).
        connect_timeout_s: TCP connect timeout of one try (3 s: a reachable store on a LAN or
            in-region answers in milliseconds; a longer one only delays the retry).
        request_timeout_s: timeout of one request (30 s: an 8 MiB piece at >= 0.3 MB/s; a hung
            (SIGSTOPped) store is detected after this, then retried).

    Example:
        >>> Dataset("s3://bucket/lake", snapshot="pick-v3", storage_options=opts, cache=cache,
        ...         retry=RetryConfig(deadline_s=300))
    """

    deadline_s: float = 60.0
    initial_backoff_s: float = 0.1
    max_backoff_s: float = 4.0
    multiplier: float = 2.0
    connect_timeout_s: float = 3.0
    request_timeout_s: float = 30.0

    def __post_init__(self) -> None:
        for name in (
            "deadline_s",
            "initial_backoff_s",
            "max_backoff_s",
            "multiplier",
            "connect_timeout_s",
            "request_timeout_s",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise ValueError(f"RetryConfig.{name} must be a number > 0, got {value!r}")
        if self.multiplier < 1:
            raise ValueError(f"RetryConfig.multiplier must be >= 1, got {self.multiplier!r}")
        if self.max_backoff_s < self.initial_backoff_s:
            raise ValueError(
                f"RetryConfig.max_backoff_s ({self.max_backoff_s}) must be >= initial_backoff_s "
                f"({self.initial_backoff_s})"
            )

    def backoff_s(self, attempt: int, rng: random.Random) -> float:
        """The wait before try `attempt + 1` (attempt counts from 0): full jitter, uniform in
        [0, min(max, initial * multiplier**attempt)], so clients that failed together do not
        retry together."""
        cap = min(self.max_backoff_s, self.initial_backoff_s * self.multiplier ** min(attempt, 64))
        return rng.uniform(0.0, cap)


# Classification of the messages of pyarrow's S3 client (AWS SDK) and deltalake's (object_store).
_PERMANENT = re.compile(
    r"ACCESS_DENIED|AccessDenied|\b403\b|Forbidden|INVALID_ACCESS_KEY|InvalidAccessKeyId|"
    r"SignatureDoesNotMatch|SIGNATURE_DOES_NOT_MATCH|NoSuchBucket|NO_SUCH_BUCKET|"
    r"InvalidBucketName|\b400\b|\b401\b|Unauthorized|PermanentRedirect|\b301\b",
    re.IGNORECASE,
)
_MISSING = re.compile(r"NoSuchKey|NO_SUCH_KEY|RESOURCE_NOT_FOUND|\b404\b|Not ?Found", re.IGNORECASE)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")

_lock = threading.Lock()
_counts = {"storage_retries": 0, "storage_giveups": 0, "storage_permanent_errors": 0}
_rng = random.Random()


# Parts of a message that may hold digits that look like status codes: URLs, quoted keys and
# bucket names, durations ("in 301.2µs" is not a redirect).
_NOT_STATUS = re.compile(r"https?://\S+|'[^']*'|\"[^\"]*\"|\d+(?:\.\d+)?\s*(?:µs|us|ns|ms|s)\b")


def classify(message: str) -> str:
    """The kind of an error from an S3 client, from its text: "permanent", "missing" (the object
    or table is not there) or "transient". Unknown errors count as transient: the deadline
    bounds them."""
    text = _NOT_STATUS.sub(" ", message)
    if _PERMANENT.search(text):
        return "permanent"
    if _MISSING.search(text):
        return "missing"
    return "transient"


def clean(message: str) -> str:
    """An error text on one line, without deltalake's terminal colours."""
    return " ".join(_ANSI.sub("", message).replace("↳", "").split())


def retry_counts() -> dict[str, int]:
    """This process's counters: "storage_retries" (tries after a transient error),
    "storage_giveups" (reads that failed at the deadline) and "storage_permanent_errors"."""
    with _lock:
        return dict(_counts)


def _count(name: str) -> None:
    with _lock:
        _counts[name] += 1


def retrying(
    op: Callable[[], T],
    *,
    what: str,
    endpoint: str,
    config: RetryConfig,
    is_transient: Callable[[BaseException], bool],
    message: Callable[[BaseException], str] = lambda err: clean(str(err)),
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """`op()`, tried again after a jittered backoff while it raises an error `is_transient`
    accepts, until `config.deadline_s` has passed since the first try.

    Any other error propagates at once (counted as permanent when it is an OSError or a
    StorageError). `message` turns an error into text for the final StoreUnreachableError (pass
    one that scrubs credentials).

    Raises:
        StoreUnreachableError: the store still failed when the deadline passed (names `endpoint`,
            the deadline, the tries and the last error).
    """
    start = time.monotonic()
    attempt = 0
    while True:
        try:
            return op()
        except BaseException as err:
            if not is_transient(err):
                if isinstance(err, OSError | StorageError):
                    _count("storage_permanent_errors")
                raise
            elapsed = time.monotonic() - start
            with _lock:
                wait = config.backoff_s(attempt, _rng)
            if elapsed + wait >= config.deadline_s:
                _count("storage_giveups")
                raise StoreUnreachableError(
                    f"the object store at {endpoint} is unreachable: {what} failed {attempt + 1} "
                    f"time(s) over {elapsed:.1f} s, the retry deadline is {config.deadline_s:g} s "
                    f"(RetryConfig.deadline_s); last error: {message(err)}. Check that the store is "
                    "up and reachable from this host (endpoint, network, DNS), or raise the deadline "
                    "to ride out longer outages"
                ) from None  # the chained error's text could carry a credential
            _count("storage_retries")
            sleep(wait)
            attempt += 1
