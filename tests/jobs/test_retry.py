"""The sink's retries for a dependency that is down (pi_jobs.stream._retry), and the restart
strategy of a deployed stream job (never gives up) next to the embedded one's (bounded)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pi_jobs.stream._retry import is_transient, with_retries

DELTA_REFUSED = (
    "Kernel error -> Generic S3 error\n  Error performing GET "
    "http://127.0.0.1:1/x/_delta_log/_last_checkpoint in 3.5s, after 10 retries - HTTP error\n"
    " error sending request\n tcp connect error\n"
    " Connection refused (os error 111)"
)
CLICKHOUSE_REFUSED = (
    "Error HTTPConnectionPool(host='127.0.0.1', port=1): Max retries exceeded with url: /?query_id=1 "
    "(Caused by NewConnectionError(Failed to establish a new connection: [Errno 111] Connection refused))"
)


def test_unreachable_servers_are_transient_refusals_are_not() -> None:
    assert is_transient(OSError(DELTA_REFUSED))
    assert is_transient(RuntimeError(CLICKHOUSE_REFUSED))
    assert is_transient(ConnectionResetError("peer reset"))
    # pyarrow's S3 filesystem (LakeWriter's Parquet files), the object store down
    assert is_transient(
        OSError(
            "When initiating multiple part upload for key 'lake/raw/part-1.parquet' in bucket 'b': AWS Error "
            "NETWORK_CONNECTION during CreateMultipartUpload operation: curlCode: 7, "
            "Couldn't connect to server"
        )
    )
    assert is_transient(OSError("Server returned non-2xx status code: 503 Service Unavailable"))
    # wrapped: the cause decides
    try:
        try:
            raise OSError(DELTA_REFUSED)
        except OSError as inner:
            raise RuntimeError("catalog record failed") from inner
    except RuntimeError as outer:
        assert is_transient(outer)
    assert not is_transient(PermissionError("[Errno 13] Permission denied: '/lake/_delta_log'"))
    assert not is_transient(OSError("Generic S3 error: 403 Forbidden: AccessDenied"))
    assert not is_transient(ValueError("schema mismatch: column steps"))


def test_retries_until_the_server_is_back_then_returns() -> None:
    calls: list[int] = []
    sleeps: list[float] = []
    reopened: list[int] = []

    def attempt() -> str:
        calls.append(1)
        if len(calls) < 4:
            raise OSError(DELTA_REFUSED)
        return "committed"

    got = with_retries(
        "lake commit", attempt, retry_s=60, before_retry=lambda: reopened.append(1), sleep=sleeps.append
    )
    assert got == "committed" and len(calls) == 4 and len(reopened) == 3
    assert sleeps == [0.5, 1.0, 2.0]  # back-off doubles


def test_gives_up_when_time_runs_out_and_at_once_on_a_permanent_error() -> None:
    calls: list[int] = []

    def down() -> None:
        calls.append(1)
        raise OSError(DELTA_REFUSED)

    with pytest.raises(OSError, match="Connection refused"):
        with_retries("lake commit", down, retry_s=0.0, sleep=lambda s: None)
    assert len(calls) == 1
    calls.clear()

    def refused() -> None:
        calls.append(1)
        raise PermissionError("Permission denied")

    with pytest.raises(PermissionError):
        with_retries("lake commit", refused, retry_s=60, sleep=lambda s: None)
    assert len(calls) == 1


def test_a_deployed_job_never_gives_up_and_the_embedded_one_does(monkeypatch: pytest.MonkeyPatch) -> None:
    from dataclasses import replace

    from pi_jobs.stream.config import StreamJobConfig
    from pi_jobs.stream.job import RESTART_ATTEMPTS, UNBOUNDED_ATTEMPTS

    # in a child: a pyflink Configuration starts the Java gateway, and a JVM started here would be
    # shared by later tests' Flink jobs with this moment's environment
    key = "restart-strategy.exponential-delay.attempts-before-reset-backoff"
    probe = (
        "from pi_jobs.stream.job import python_worker_configuration as c; "
        f"print(c().get_string({key!r}, ''), c(None).get_string({key!r}, ''))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.split() == [str(RESTART_ATTEMPTS), str(UNBOUNDED_ATTEMPTS)]
    base = StreamJobConfig("127.0.0.1:1", "/tmp/lake", "/tmp/catalog", Path("/tmp/w"), Path("/tmp/j"))
    assert base.restart_attempts == RESTART_ATTEMPTS
    with pytest.raises(ValueError, match="restart_attempts must be >= 1 or None"):
        replace(base, restart_attempts=0)
    with pytest.raises(ValueError, match="dependency_retry_s must be in"):
        replace(base, dependency_retry_s=-1)
    # the image's launcher (the FlinkDeployment's entry) builds a job that never gives up
    launcher = Path(__file__).parents[2] / "deploy" / "job" / "launch_stream_job.py"
    spec = importlib.util.spec_from_file_location("launch_stream_job", launcher)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    # the launcher exports settings into os.environ: give it a copy, dropped after the test
    monkeypatch.setattr(os, "environ", {**os.environ, "PILAKE_HOME": "/tmp/pilake-launcher-test"})
    assert module.job_config().restart_attempts is None


def test_retries_and_final_failures_are_counted_by_operation() -> None:
    """Each retried attempt and each final failure shows in the worker's metrics
    (PilakeStreamStalled reads them: a store that is down stops commits and episodes_in alike)."""
    from pi_jobs.stream._metrics import OPERATIONS, REGISTRY

    def count(kind: str, operation: str) -> float:
        value = REGISTRY.get_sample_value(f"pilake_stream_dependency_{kind}_total", {"operation": operation})
        assert value is not None, (kind, operation)  # a 0 series from the start
        return float(value)

    assert "lake_commit" in OPERATIONS and "catalog_record" in OPERATIONS
    retries, failures = count("retries", "lake_commit"), count("failures", "lake_commit")
    calls: list[int] = []

    def twice_refused() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise OSError(DELTA_REFUSED)
        return "committed"

    assert with_retries("lake commit", twice_refused, retry_s=60, sleep=lambda s: None) == "committed"
    assert count("retries", "lake_commit") == retries + 2
    assert count("failures", "lake_commit") == failures

    def denied() -> None:
        raise OSError("Generic LocalFileSystem error: Permission denied (os error 13)")

    before = count("failures", "catalog_record")
    with pytest.raises(OSError, match="Permission denied"):
        with_retries("catalog record", denied, retry_s=60, sleep=lambda s: None)
    assert count("failures", "catalog_record") == before + 1
