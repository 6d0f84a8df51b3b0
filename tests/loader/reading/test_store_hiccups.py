"""pi_loader rides out object-storage hiccups: retries with backoff under a deadline, permanent
errors refused at once, hostile bodies refused with bounded retries (issue 32 item 3).

Transient failures come from real clients against a real dead port and a hostile HTTP endpoint
(tests/loader/reading/hostile_s3.py, a test double for a store that misbehaves on demand); the
outage test with real SeaweedFS is tests/loader/test_store_outage.py.
"""

from __future__ import annotations

import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pi_loader import PermanentStorageError, RetryConfig, StoreUnreachableError
from pi_loader.reading._cache import CacheConfig
from pi_loader.reading._retry import classify, retry_counts, retrying
from pi_loader.reading._storage import S3Storage, storage_for

SECRET = "hostile-secret-Qx7"


@pytest.fixture(scope="module")
def hostile() -> Iterator[str]:
    """The hostile endpoint's URL."""
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("hostile_s3.py"))], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.kill()
        proc.wait(timeout=10)


def _storage(endpoint: str, cache: Path, deadline_s: float = 2.0) -> S3Storage:
    options = {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ALLOW_HTTP": "true",
        "AWS_ACCESS_KEY_ID": "hostile",
        "AWS_SECRET_ACCESS_KEY": SECRET,
        "AWS_REGION": "us-east-1",
    }
    storage = storage_for(
        "s3://b/lake",
        storage_options=options,
        cache=CacheConfig(cache, 10**6),
        retry=RetryConfig(deadline_s=deadline_s, initial_backoff_s=0.01, max_backoff_s=0.05),
    )
    assert isinstance(storage, S3Storage)
    return storage


# -- the policy ----------------------------------------------------------------------------------


def test_retry_config_validates_and_backs_off_with_full_jitter() -> None:
    for bad in ({"deadline_s": 0}, {"multiplier": 0.5}, {"max_backoff_s": 0.01}, {"deadline_s": True}):
        with pytest.raises(ValueError, match="RetryConfig"):
            RetryConfig(**bad)
    config = RetryConfig(initial_backoff_s=0.1, max_backoff_s=1.0)
    rng = random.Random(0)
    waits = [config.backoff_s(a, rng) for a in range(40)]
    assert all(0 <= w <= min(1.0, 0.1 * 2**a) for a, w in enumerate(waits))
    assert len(set(waits)) == len(waits)  # jittered


def test_classify_permanent_missing_and_transient() -> None:
    assert classify("AWS Error ACCESS_DENIED during HeadObject operation: 403 Forbidden") == "permanent"
    assert classify("AWS Error NETWORK_CONNECTION: curlCode: 7, Couldn't connect to server") == "transient"
    assert classify("HTTP response code: 503 SlowDown") == "transient"
    assert classify("NoSuchKey: the key does not exist") == "missing"
    # digits in a duration, a URL or a key are not status codes (seen: "in 301.219µs")
    refused = (
        "Kernel error -> Generic S3 error: Error performing GET http://127.0.0.1:40301/b/403/x in "
        "301.219µs - HTTP error: error sending request: Connection refused (os error 111) for key 'p-404'"
    )
    assert classify(refused) == "transient"
    for duration in ("301ms", "400 us", "401.5s", "403ns"):
        assert classify(f"timed out after {duration}") == "transient", duration


def test_retrying_stops_at_the_deadline_and_names_the_endpoint() -> None:
    slept: list[float] = []
    before = retry_counts()

    def refused() -> None:
        raise ConnectionRefusedError("Connection refused")

    with pytest.raises(
        StoreUnreachableError, match=r"store at http://s3\.test:1 is unreachable.*deadline is 1 s"
    ):
        retrying(
            refused,
            what="stat x",
            endpoint="http://s3.test:1",
            config=RetryConfig(deadline_s=1, initial_backoff_s=0.2, max_backoff_s=0.2),
            is_transient=lambda err: isinstance(err, OSError),
            sleep=slept.append,  # no real waiting: the deadline is measured, the sleeps recorded
        )
    after = retry_counts()
    assert after["storage_giveups"] == before["storage_giveups"] + 1
    assert after["storage_retries"] - before["storage_retries"] == len(slept) > 0


@settings(max_examples=50, deadline=None)
@given(failures=st.integers(0, 6), permanent=st.booleans())
def test_retrying_returns_after_transient_failures_and_never_retries_a_permanent_one(
    failures: int, permanent: bool
) -> None:
    calls: list[int] = []

    def op() -> str:
        calls.append(1)
        if len(calls) <= failures:
            raise PermissionError("403 Forbidden") if permanent else TimeoutError("timed out")
        return "ok"

    config = RetryConfig(deadline_s=3600)
    if permanent and failures:
        with pytest.raises(PermissionError):
            retrying(
                op,
                what="x",
                endpoint="e",
                config=config,
                is_transient=lambda e: "timed" in str(e),
                sleep=lambda _: None,
            )
        assert len(calls) == 1
    else:
        got = retrying(
            op,
            what="x",
            endpoint="e",
            config=config,
            is_transient=lambda e: "timed" in str(e),
            sleep=lambda _: None,
        )
        assert got == "ok" and len(calls) == failures + 1


# -- hostile bodies, through pyarrow's real S3 client ------------------------------------------------


def test_hostile_store_bodies_are_refused_within_the_deadline(hostile: str, tmp_path: Path) -> None:
    storage = _storage(hostile, tmp_path / "cache", deadline_s=1)
    before = retry_counts()
    with pytest.raises(PermanentStorageError, match=r"refused: .*(403|ACCESS_DENIED).*credentials") as denied:
        storage.local_path("s3://b/lake/steps/forbidden-4000.parquet")
    assert retry_counts()["storage_retries"] == before["storage_retries"]  # not retried
    assert SECRET not in str(denied.value) and denied.value.__cause__ is None
    # a body cut mid-transfer, or longer than its Content-Length: the client cannot tell them from
    # a network failure, so they are retried, and fail at the deadline, naming the object
    for mode in ("cut", "too-long"):
        with pytest.raises(
            StoreUnreachableError, match=rf"download s3://b/lake/steps/{mode}-4000.*deadline is 1 s"
        ):
            storage.local_path(f"s3://b/lake/steps/{mode}-4000.parquet")
    # short bodies to ranged reads: pyarrow asks for the rest, the bytes are wrong, Parquet refuses them
    path = storage.local_path("s3://b/lake/steps/wrong-length-4000.parquet")
    with pytest.raises(Exception, match=r"(?i)parquet"):
        pq.read_table(path)
    # nothing half-written stays in the cache, and a good object beside them still reads
    assert Path(storage.local_path("s3://b/lake/steps/ok-4000.parquet")).stat().st_size == 4000
    assert list((tmp_path / "cache" / "tmp").iterdir()) == []
    names = sorted(p.name for p in (tmp_path / "cache" / "objects").rglob("*.parquet"))
    assert len(names) == 2  # wrong-length (its bytes are a Parquet error) and ok


def test_throttled_reads_are_retried_and_counted(hostile: str, tmp_path: Path) -> None:
    storage = _storage(hostile, tmp_path / "cache", deadline_s=30)
    before = retry_counts()
    path = storage.local_path("s3://b/lake/steps/flaky-3000.parquet")
    assert Path(path).stat().st_size == 3000
    assert retry_counts()["storage_retries"] - before["storage_retries"] == 2  # two 503 SlowDown


def test_garbage_of_the_right_length_is_a_parquet_error_not_a_retry(hostile: str, tmp_path: Path) -> None:
    storage = _storage(hostile, tmp_path / "cache")
    before = retry_counts()
    path = storage.local_path("s3://b/lake/steps/garbage-5000.parquet")
    with pytest.raises(Exception, match=r"(?i)parquet"):
        pq.read_table(path)
    assert retry_counts() == before


def test_dead_endpoint_fails_at_the_deadline_naming_it(tmp_path: Path) -> None:
    storage = _storage("http://127.0.0.1:9", tmp_path / "cache", deadline_s=1)
    with pytest.raises(
        StoreUnreachableError, match=r"127\.0\.0\.1:9 is unreachable.*retry deadline is 1 s"
    ) as info:
        storage.local_path("s3://b/lake/steps/ok-1.parquet")
    assert SECRET not in str(info.value)
