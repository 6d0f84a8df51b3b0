"""A stream sink (re)started while the lake's object store is down serves its metrics while its
lake open retries.

Recorded (deploy/prometheus/testdata, case freshness_outage): with the store down 380 s, the
sink's commit retries ran out, Flink restarted the task, and each restarted sink waited for the
store in its lake open before it started its metrics: no worker answered for 270 scrapes, so the
on-call saw PilakeStreamJobDown and stale series instead of the sink's lake_open retries
(PilakeStreamStalled). The real sink function opens here against an S3 endpoint where nothing
listens (connection refused, as a stopped store's port gives); a stand-in only for the Flink
runtime around it (the subtask index).
"""

from __future__ import annotations

import threading
import time
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import _free_port

LAKE_OPEN_RETRIES = 'pilake_stream_dependency_retries_total{operation="lake_open"}'


class FlinkRuntimeStandIn:
    """The one thing the sink's open() asks the Flink runtime before it opens the lake."""

    def get_index_of_this_subtask(self) -> int:
        return 0


def _lake_open_retries(port: int) -> float | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            text = response.read().decode()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(LAKE_OPEN_RETRIES):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_a_sink_opened_with_the_store_down_serves_its_lake_open_retries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pi_jobs.stream import _metrics
    from pi_jobs.stream._sink import EpisodeSinkFunction
    from pi_jobs.stream._sink_settings import SinkSettings
    from pi_jobs.stream.featurize import FeaturizeConfig

    store = f"http://127.0.0.1:{_free_port()}"  # nothing listens: the store is down
    for key, value in {
        "AWS_ENDPOINT_URL": store,
        "AWS_ALLOW_HTTP": "true",
        "AWS_ACCESS_KEY_ID": "pilake",
        "AWS_SECRET_ACCESS_KEY": "pilake-secret",
        "AWS_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(key, value)
    port = _free_port()
    settings = SinkSettings(
        bootstrap_servers=f"127.0.0.1:{_free_port()}",
        lake_root="s3://pilake-test/lake",
        catalog_path=str(tmp_path / "catalog"),
        raw_topic="open-raw",
        ack_topic="open-acks",
        progress_path=str(tmp_path / "progress.json"),
        featurize=FeaturizeConfig(),
        metrics_ports=(port, port),
        dependency_retry_s=15.0,  # the store stays down: the open fails after this (a few retries)
    )
    sink = EpisodeSinkFunction(settings)
    failed: list[BaseException] = []

    def open_sink() -> None:
        try:
            sink.open(FlinkRuntimeStandIn())
        except Exception as err:
            failed.append(err)

    opening = threading.Thread(target=open_sink, daemon=True)
    opening.start()
    served: list[float] = []
    deadline = time.monotonic() + 120  # a bound on the loop, not a timed assertion
    try:
        while opening.is_alive() and time.monotonic() < deadline:
            # this process's worker endpoint (one per process: an earlier test may have started it)
            retries = _lake_open_retries(_metrics._state.get("port") or port)
            if retries is not None and opening.is_alive():
                served.append(retries)
            time.sleep(0.2)
        opening.join(timeout=120)
    finally:
        # as Flink does after a failed open: the scrapes' lag consumer would otherwise reconnect
        # to the never-started broker until the process exits (tests/jobs/test_stream_lag_close)
        sink.close()
    assert not opening.is_alive(), "the sink's open did not give up on the store"
    assert served and max(served) >= 1, f"no metrics served while the lake open retried: {served} {failed}"
    # the store never came back: the open failed for good, with the store's error
    assert failed and "connection refused" in str(failed[0]).lower(), failed
