"""A stream sink's consumer-lag metric leaves no Kafka client behind once the sink closes.

The lag is read from the broker when `/metrics` is scraped, by a confluent-kafka consumer the
collector makes on the first scrape (pi_jobs.stream._metrics.LagCollector). Nothing closed it:
it lived in the module's state as long as the process, and librdkafka reconnected to a broker
long gone until exit (the CI log of the whole suite ended in hundreds of
`rdkafka#consumer-318 ... Connect to ipv4#127.0.0.1:PORT failed: Connection refused` lines,
from tests/jobs/test_stream_sink_open.py's sink). A live librdkafka client shows as threads
named `rdk:*` in /proc/self/task, which is what these tests count.

The real sink function, LakeWriter on local disk and metrics endpoint; the broker is a port
where nothing listens (a stopped broker); the Flink runtime around the sink is
`FlinkRuntimeStandIn` (tests/jobs/test_stream_resend).
"""

from __future__ import annotations

import gc
import os
import urllib.request
from pathlib import Path

from tests.conftest import _free_port
from tests.fixtures.kafka_leaks import kafka_threads
from tests.jobs.test_stream_resend import FlinkRuntimeStandIn


def _kafka_threads() -> int:
    """librdkafka threads alive in this process (each client has `rdk:main` and its brokers')."""
    assert os.path.isdir("/proc/self/task"), "these tests count threads in /proc (Linux)"
    return kafka_threads()


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        return str(response.read().decode())


def test_a_closed_sink_leaves_no_lag_consumer_reconnecting(tmp_path: Path) -> None:
    from pi_jobs.stream import _metrics
    from pi_jobs.stream._sink import EpisodeSinkFunction
    from pi_jobs.stream._sink_settings import SinkSettings
    from pi_jobs.stream.featurize import FeaturizeConfig

    before = _kafka_threads()  # clients an earlier test of this process may still hold
    port = _free_port()
    settings = SinkSettings(
        bootstrap_servers=f"127.0.0.1:{_free_port()}",  # nothing listens: the broker is gone
        lake_root=str(tmp_path / "lake"),
        catalog_path=str(tmp_path / "catalog"),
        raw_topic="lag-raw",
        ack_topic="lag-acks",
        progress_path=str(tmp_path / "progress.json"),
        featurize=FeaturizeConfig(video_width=32, video_height=32, chunk_frames=4),
        metrics_ports=(port, port),
    )
    sink = EpisodeSinkFunction(settings)
    try:
        sink.open(FlinkRuntimeStandIn())
        # this process's endpoint (one per process: an earlier test may have started it)
        text = _scrape(_metrics._state.get("port") or port)
        assert "pilake_stream_consumer_lag_messages" in text  # the scrape asked the broker
        assert _kafka_threads() > before  # the lag consumer (and the ack producer) are up
    finally:
        sink.close()
    del sink  # the ack producer ends with the sink object
    gc.collect()
    assert _kafka_threads() <= before, "a Kafka client of the closed sink is still reconnecting"
    # the endpoint stays up with the process; a scrape now makes no new consumer
    _scrape(_metrics._state.get("port") or port)
    assert _kafka_threads() <= before


def test_a_reopened_sinks_metrics_close_the_old_lag_consumer() -> None:
    from pi_jobs.stream import _metrics

    before = _kafka_threads()
    bootstrap = f"127.0.0.1:{_free_port()}"  # nothing listens
    ports = (_free_port(),) * 2
    lag_threads, collectors = [], []
    try:
        for _ in range(3):  # a sink reopened twice in one worker (Flink restarts the task)
            _metrics.start_worker_metrics(
                ports, subtask=0, bootstrap_servers=bootstrap, topic="t", client_options={}, offsets=dict
            )
            collectors.append(_metrics._state["lag"])
            list(_metrics.REGISTRY.collect())  # a scrape: the current collector makes its consumer
            lag_threads.append(_kafka_threads() - before)
    finally:
        _metrics.stop_worker_metrics()
    assert lag_threads[0] > 0
    # each replaced collector closed its consumer (the state, exactly); and the threads show one
    # live consumer at a time: librdkafka starts a consumer's threads (rdk:main, its internal and
    # bootstrap brokers: 3-4 here, one not always up when counted) so two live ones show >= 6
    assert all(c._closed and c._consumer is None for c in collectors), "a lag consumer left open"
    assert max(lag_threads) < 6, f"old lag consumers left running: {lag_threads}"
    assert _kafka_threads() <= before


def test_the_session_report_names_the_test_after_which_clients_stayed() -> None:
    from tests.fixtures.kafka_leaks import KafkaThreadWatch

    watch = KafkaThreadWatch(baseline=0)
    for test, count in [("a", 4), ("b", 0), ("c", 4), ("d", 8), ("e", 12), ("f", 4), ("g", 4)]:
        watch.after(test, count)  # a: closed by b; d and e: closed (or collected) by f
    assert watch.left(4) == [("c", 4)]
    assert watch.left(0) == []
    assert KafkaThreadWatch(baseline=4).left(4) == []  # threads from before the first test
