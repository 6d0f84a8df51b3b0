"""Prometheus metrics of the stream job's lake sink, served by each Python worker process.

Why prometheus_client in the worker rather than Flink's metric group with the
flink-metrics-prometheus reporter (which the apache-flink wheel does ship, in
`pyflink/plugins/metrics-prometheus`): PyFlink's Python metric group offers counters, gauges,
meters and distributions but no histogram, and commit latency and freshness need real
histograms (quantiles over many workers); the reporter also has to be configured into the JVMs
of the mini-cluster or session cluster, while a worker-side endpoint works unchanged on both.
Each worker process (one per sink subtask) serves its own `/metrics` on the first free port of
the configured range, so several subtasks can share a host.

What is counted (all in this process's `REGISTRY`): messages and payload bytes in, complete
episodes in, committed, duplicate and quarantined (by reason) episodes, Arrow bytes handed to
Delta commits, the group commit's latency, freshness, and the consumer lag, which is read from
the broker when scraped (never on the record path).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

log = logging.getLogger("pi_jobs.stream")

__all__ = [
    "FRESHNESS_BUCKETS",
    "METRIC_NAMES",
    "OPERATIONS",
    "REGISTRY",
    "LagCollector",
    "record_commit",
    "record_dependency",
    "serve_first_free",
    "start_worker_metrics",
    "stop_worker_metrics",
]

REGISTRY = CollectorRegistry()

MESSAGES_IN = Counter("pilake_stream_messages", "Kafka records the sink received.", registry=REGISTRY)
BYTES_IN = Counter("pilake_stream_bytes_in", "Payload bytes of the records received.", registry=REGISTRY)
EPISODES_IN = Counter(
    "pilake_stream_episodes_in",
    "Episodes whose chunks all arrived (complete, before checks).",
    registry=REGISTRY,
)
COMMITTED = Counter(
    "pilake_stream_episodes_committed", "Episodes made visible by a Delta group commit.", registry=REGISTRY
)
DUPLICATES = Counter(
    "pilake_stream_episodes_duplicate",
    "Re-sent or replayed episodes found already committed (acked again, not written).",
    registry=REGISTRY,
)
QUARANTINED = Counter(
    "pilake_stream_episodes_quarantined",
    "Quarantine rows written, by reason (a single unusable message counts as one).",
    ["reason"],
    registry=REGISTRY,
)
BYTES_WRITTEN = Counter(
    "pilake_stream_bytes_written",
    "Arrow (in-memory) bytes of the rows handed to Delta group commits: raw, episodes, steps, "
    "video. Parquet files on disk are smaller (compressed).",
    registry=REGISTRY,
)
COMMIT_SECONDS = Histogram(
    "pilake_stream_commit_seconds",
    "Wall time of one group commit (Delta commits of every table plus the catalog update).",
    # up to 300 s: a commit that waits out a store restart (dependency_retry_s, 120 s) lands
    # in a finite bucket
    buckets=(0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 300.0),
    registry=REGISTRY,
)
# Bounds of the freshness histogram. PilakeFreshnessSlow's threshold (300 s) is one of them, and
# there are finite buckets above it: histogram_quantile cannot return more than the top finite
# bound, so a top bound under the threshold (it was 128 s) makes the alert unable to fire.
FRESHNESS_BUCKETS = (
    0.1,
    0.25,
    0.5,
    1.0,
    2.0,
    4.0,
    8.0,
    16.0,
    32.0,
    64.0,
    128.0,
    300.0,
    600.0,
    1800.0,
    3600.0,
)
FRESHNESS_SECONDS = Histogram(
    "pilake_stream_freshness_seconds",
    "Per committed episode: its Delta commit time minus the Kafka timestamp (producer send time) "
    "of its latest chunk; minus that chunk's arrival at the sink when records carry no timestamp.",
    buckets=FRESHNESS_BUCKETS,
    registry=REGISTRY,
)
HELD_BYTES = Gauge(
    "pilake_stream_held_bytes",
    "Bytes of messages the sink holds in memory (episodes assembling or waiting for their group "
    "commit); bounded by the limit max_held_bytes (pi_jobs.stream.limits).",
    registry=REGISTRY,
)
HELD_EPISODES = Gauge(
    "pilake_stream_held_episodes",
    "Episodes the sink holds in memory (assembling or waiting for their group commit).",
    registry=REGISTRY,
)
LIMIT_REFUSALS = Counter(
    "pilake_stream_limit_refusals",
    "Times a limit of the sink acted, by limit: a message or episode quarantined as "
    "limit_exceeded, or a group committed early to stay within max_held_bytes / "
    "max_episodes_per_key.",
    ["limit"],
    registry=REGISTRY,
)
# The sink's operations on its dependencies that `pi_jobs.stream._retry.with_retries` retries
# (the label values; each series exists at 0 from the start so that increase() sees the first).
OPERATIONS = ("lake_open", "lake_commit", "catalog_record", "catalog_freshness_record")
DEPENDENCY_RETRIES = Counter(
    "pilake_stream_dependency_retries",
    "Attempts of an operation on the lake store or the catalog that failed with a transient "
    "error (connection refused, timeout, 5xx) and were retried, by operation. Rising while "
    "nothing is committed: the object store or the catalog is down.",
    ["operation"],
    registry=REGISTRY,
)
DEPENDENCY_FAILURES = Counter(
    "pilake_stream_dependency_failures",
    "Operations on the lake store or the catalog that failed for good (not transient, or still "
    "failing after dependency_retry_s): each fails the sink task, and Flink restarts it.",
    ["operation"],
    registry=REGISTRY,
)
for _operation in OPERATIONS:
    DEPENDENCY_RETRIES.labels(_operation)
    DEPENDENCY_FAILURES.labels(_operation)

SUBTASK = Gauge(
    "pilake_stream_subtask", "Index of the sink subtask this worker process runs.", registry=REGISTRY
)

# Every series name of this module (counters with _total, histograms by their base name), for
# the dashboard test and `pilake status`.
METRIC_NAMES = (
    "pilake_stream_messages_total",
    "pilake_stream_bytes_in_total",
    "pilake_stream_episodes_in_total",
    "pilake_stream_episodes_committed_total",
    "pilake_stream_episodes_duplicate_total",
    "pilake_stream_episodes_quarantined_total",
    "pilake_stream_bytes_written_total",
    "pilake_stream_commit_seconds",
    "pilake_stream_freshness_seconds",
    "pilake_stream_held_bytes",
    "pilake_stream_held_episodes",
    "pilake_stream_limit_refusals_total",
    "pilake_stream_dependency_retries_total",
    "pilake_stream_dependency_failures_total",
    "pilake_stream_subtask",
    "pilake_stream_consumer_lag_messages",
    "pilake_stream_partition_offset",
)


def record_commit(group: Sequence[Any], result: Any, *, seconds: float, committed_at_ns: int) -> None:
    """Count one group commit of the sink: its latency, its episodes, the Arrow bytes handed
    to Delta, and each committed episode's freshness.

    Args:
        group: the sink's waiting episodes of this commit (`rows`, `raw`, `published_at_ns`).
        result: the writer's `pi_format.lake.GroupCommit`.
        seconds: wall time of the Delta commits plus the catalog update.
        committed_at_ns: when the Delta commit returned (wall clock).

    Example:
        >>> record_commit(group, result, seconds=0.31, committed_at_ns=time.time_ns())
    """
    COMMIT_SECONDS.observe(seconds)
    committed = set(result.committed)
    for w in group:
        BYTES_WRITTEN.inc(w.raw.nbytes + w.rows.episode.nbytes + w.rows.steps.nbytes + w.rows.video.nbytes)
        if w.rows.episode_id not in committed:
            continue
        # the Kafka timestamp of its latest chunk; without one, its latest arrival at the sink
        last = getattr(w, "published_at_ns", None) or max(w.raw.column("received_at_ns").to_pylist())
        FRESHNESS_SECONDS.observe(max(0.0, (committed_at_ns - last) / 1e9))
    COMMITTED.inc(len(committed))
    DUPLICATES.inc(len(result.duplicates))


def record_dependency(operation: str, *, failed: bool) -> None:
    """Count one retried (`failed=False`) or finally failed (`failed=True`) attempt of a sink
    operation on the lake store or the catalog ("lake commit" and "lake_commit" are one label).

    Example:
        >>> record_dependency("lake commit", failed=False)
    """
    label = operation.replace(" ", "_")
    (DEPENDENCY_FAILURES if failed else DEPENDENCY_RETRIES).labels(label).inc()


class LagCollector(Collector):
    """Consumer lag per partition of the raw topic, read from the broker when scraped.

    lag = high watermark - 1 - the highest offset this subtask has received. With several
    sink subtasks each sees only its keys' records, so the job's lag of a partition is the
    minimum over subtasks (`min by (partition)` in PromQL). The local Tansu broker reports the
    start of the last batch + 1 as its high watermark (ARCHITECTURE.md), so there the figure
    can be short by up to a batch: a lower bound.
    """

    def __init__(
        self,
        *,
        bootstrap_servers: str,
        topic: str,
        client_options: Mapping[str, str],
        offsets: Callable[[], Mapping[str, int]],
    ) -> None:
        self._conf = {
            **client_options,
            "bootstrap.servers": bootstrap_servers,
            "group.id": "pilake-stream-lag-probe",  # never joined: watermarks only
            "enable.auto.commit": False,
        }
        self._topic = topic
        self._offsets = offsets
        self._consumer: Any = None
        self._closed = False
        self._lock = threading.Lock()

    def describe(self) -> Iterator[GaugeMetricFamily]:
        """The families `collect` yields, without asking the broker (used at registration)."""
        yield GaugeMetricFamily("pilake_stream_partition_offset", "", labels=["partition"])
        yield GaugeMetricFamily("pilake_stream_consumer_lag_messages", "", labels=["partition"])

    def collect(self) -> Iterator[GaugeMetricFamily]:
        seen = GaugeMetricFamily(
            "pilake_stream_partition_offset",
            "Highest Kafka offset of the raw topic this subtask received, per partition.",
            labels=["partition"],
        )
        offsets = dict(self._offsets())
        for key, offset in sorted(offsets.items()):  # the progress file's keys: partitions as text
            seen.add_metric([key], offset)
        yield seen
        lag = GaugeMetricFamily(
            "pilake_stream_consumer_lag_messages",
            "High watermark - 1 - highest offset received, per partition (a lower bound on Tansu).",
            labels=["partition"],
        )
        try:
            for partition, high in self._watermarks().items():
                received = offsets.get(str(partition), -1)
                lag.add_metric([str(partition)], max(0, high - 1 - received))
        except Exception as err:  # a scrape must not fail because the broker is slow or away
            log.debug("consumer lag unavailable: %s", err)
        yield lag

    def _watermarks(self) -> dict[int, int]:
        from confluent_kafka import Consumer, TopicPartition

        with self._lock:  # scrapes can overlap; the consumer is not thread-safe
            if self._closed:  # a scrape that raced close(): no new consumer nobody would close
                return {}
            if self._consumer is None:
                self._consumer = Consumer(self._conf)
            meta = self._consumer.list_topics(self._topic, timeout=2.0)
            topic = meta.topics.get(self._topic)
            if topic is None or topic.error is not None:
                return {}
            return {
                p: int(self._consumer.get_watermark_offsets(TopicPartition(self._topic, p), timeout=2.0)[1])
                for p in sorted(topic.partitions)
            }

    def close(self) -> None:
        """Close the lag consumer (if a scrape made one); later scrapes report no lag.

        Without it the consumer lives as long as the process and librdkafka reconnects to a
        stopped broker until exit (a test suite's log ended in hundreds of `Connection refused`
        lines from the one a sink's metrics made). The consumer never joins its group (watermarks
        only), so close() sends no LeaveGroup and commits nothing: it does not wait on the broker
        (about 1 ms with the broker gone).

        Example:
            >>> lag.close()
        """
        with self._lock:
            self._closed = True
            consumer, self._consumer = self._consumer, None
            if consumer is not None:
                consumer.close()


def serve_first_free(first: int, last: int, registry: CollectorRegistry) -> int | None:
    """Serve `registry` on the first port of [first, last] that is free; None if none is.

    Example:
        >>> serve_first_free(9470, 9477, REGISTRY)
        9470
    """
    for port in range(first, last + 1):
        try:
            start_http_server(port, registry=registry)
        except OSError:
            continue
        return port
    return None


_state: dict[str, Any] = {}
_state_lock = threading.Lock()


def start_worker_metrics(
    ports: tuple[int, int],
    *,
    subtask: int,
    bootstrap_servers: str,
    topic: str,
    client_options: Mapping[str, str],
    offsets: Callable[[], Mapping[str, int]],
) -> int | None:
    """Serve this worker's metrics (once per process; a reopened sink after a Flink restart
    keeps the port and points the lag at its new offsets). Returns the port, or None when every
    port of the range is taken (logged: the job runs on without metrics)."""
    with _state_lock:
        SUBTASK.set(subtask)
        old = _state.get("lag")
        if old is not None:
            REGISTRY.unregister(old)
            old.close()
        lag = LagCollector(
            bootstrap_servers=bootstrap_servers, topic=topic, client_options=client_options, offsets=offsets
        )
        REGISTRY.register(lag)
        _state["lag"] = lag
        if "port" not in _state:
            _state["port"] = serve_first_free(ports[0], ports[1], REGISTRY)
            if _state["port"] is None:
                log.warning(
                    "stream metrics: every port of %d-%d is taken; this worker serves no metrics "
                    "(widen the range: PILAKE_STREAM_METRICS_PORT / PILAKE_METRICS_PORT_RANGE)",
                    ports[0],
                    ports[1],
                )
            else:
                log.info("stream metrics of subtask %d on port %d", subtask, _state["port"])
        port: int | None = _state["port"]
        return port


def stop_worker_metrics() -> None:
    """Stop reading the consumer lag for the sink that is closing: its collector is unregistered
    and its consumer closed. The endpoint stays up with the process (a reopened sink keeps the
    port); its other series stay, and the next `start_worker_metrics` adds the lag again.

    Example:
        >>> stop_worker_metrics()
    """
    with _state_lock:
        lag = _state.pop("lag", None)
        if lag is not None:
            REGISTRY.unregister(lag)
            lag.close()
