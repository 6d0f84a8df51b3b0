"""The PyFlink stream job `stream`: Kafka raw topic -> lake (Delta) + catalog + acks.

Job graph (parallelism 1): Table API Kafka source (`value.format=raw`, key, partition and
offset as columns) -> `to_data_stream` -> key_by(episode_id) -> `EpisodeSinkFunction`
(pi_jobs._stream_functions). The driver here starts it on the local mini-cluster, watches the
progress file the sink writes, and stops it when asked or, with `until_idle`, once every
record of the raw topic has been processed.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pi_format

from pi_jobs.errors import StreamJobError
from pi_jobs.featurize import FeaturizeConfig
from pi_jobs.kafka_security import java_client_properties

log = logging.getLogger("pi_jobs")


@dataclass(frozen=True, slots=True)
class StreamJobConfig:
    """Where the stream job reads, writes and keeps its working files.

    `client_options` are passed to both Kafka clients (Flink's Java source as `properties.*`,
    and the confluent-kafka ack producer / end-offset probe) for SASL/TLS; use keys both
    understand (e.g. `security.protocol`). They are never logged.

    Example:
        >>> StreamJobConfig(bootstrap_servers="127.0.0.1:19092", lake_root=".pilake/lake",
        ...                 catalog_path=".pilake/catalog", work_dir=Path(".pilake/flink"),
        ...                 jar_dir=Path(".pilake/jars"))
    """

    bootstrap_servers: str
    lake_root: str
    catalog_path: str
    work_dir: Path
    jar_dir: Path
    raw_topic: str = pi_format.RAW_TOPIC
    ack_topic: str = pi_format.ACK_TOPIC
    # one group per lake: its committed offsets say where the next run resumes
    group_id: str = "pilake-stream"
    # 2 s: offsets are committed to Kafka on checkpoints, so this bounds what a restart re-reads
    # (re-reads are harmless, decision 3) and how long `until_idle` waits after the last record.
    checkpoint_interval_ms: int = 2000
    featurize: FeaturizeConfig = field(default_factory=FeaturizeConfig)
    client_options: Mapping[str, str] = field(default_factory=dict)
    # The robot registry file of the ingest contract (pi_jobs.contract); "" = the packaged one.
    robots_path: str = ""
    # An episode with no new chunk for this long is quarantined as incomplete_timeout (its
    # chunks kept in raw). 60 s: far above the gaps between chunks of one upload, below the
    # uploader's 120 s re-send, and `until_idle` waits for it when episodes are incomplete.
    incomplete_timeout_s: float = 60.0

    def __post_init__(self) -> None:
        if not self.bootstrap_servers:
            raise ValueError("bootstrap_servers must be 'host:port[,host:port]', got ''")
        if not self.lake_root:
            raise ValueError("lake_root must be a path or URI, got ''")
        if not 0.1 <= self.incomplete_timeout_s <= 7 * 24 * 3600:
            raise ValueError(
                f"incomplete_timeout_s must be in [0.1, 604800] seconds, got {self.incomplete_timeout_s}"
            )
        if self.checkpoint_interval_ms < 100:
            raise ValueError(f"checkpoint_interval_ms must be >= 100, got {self.checkpoint_interval_ms}")
        for name in ("raw_topic", "ack_topic", "group_id"):
            if not getattr(self, name):
                raise ValueError(f"{name} must be non-empty")
        object.__setattr__(self, "work_dir", Path(self.work_dir))
        object.__setattr__(self, "jar_dir", Path(self.jar_dir))

    def __repr__(self) -> str:  # client_options may hold credentials
        return (
            f"StreamJobConfig(bootstrap_servers={self.bootstrap_servers!r}, lake_root={self.lake_root!r}, "
            f"raw_topic={self.raw_topic!r}, group_id={self.group_id!r}, work_dir={str(self.work_dir)!r})"
        )

    @property
    def log_dir(self) -> Path:
        return self.work_dir / "log"

    @property
    def progress_path(self) -> Path:
        return self.work_dir / "progress.json"


@dataclass(frozen=True, slots=True)
class StreamReport:
    """What one run of the stream job did (counts from the sink's progress file)."""

    messages: int
    episodes_committed: int
    episodes_duplicate: int
    quarantined: int
    incomplete: int
    bytes_in: int
    elapsed_s: float  # from the call to the job's stop, job startup included
    startup_s: float = 0.0  # from the call until the job was RUNNING
    busy_s: float = 0.0  # from the first to the last message the sink handled

    @property
    def mb_per_s(self) -> float:
        """Throughput over the whole call (startup and the idle wait included)."""
        return self.bytes_in / 1e6 / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def busy_mb_per_s(self) -> float:
        """Throughput while records were flowing (what a long-running job sustains)."""
        return self.bytes_in / 1e6 / self.busy_s if self.busy_s > 0 else 0.0


# -- Kafka helpers (confluent-kafka, driver side) -----------------------------------------------
def _consumer(config: StreamJobConfig, group_id: str) -> Any:
    from confluent_kafka import Consumer

    return Consumer(
        {
            **config.client_options,
            "bootstrap.servers": config.bootstrap_servers,
            "group.id": group_id,
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 1000,
            "fetch.message.max.bytes": 16 * 1024 * 1024,
        }
    )


def true_end_offsets(config: StreamJobConfig, *, quiet_s: float = 1.0) -> dict[int, int]:
    """The real end offset (last offset + 1) of every partition of the raw topic.

    The broker's ListOffsets LATEST (the high watermark) is the start of the last batch + 1,
    wrong when a batch holds several records (ARCHITECTURE.md), so read forward from just
    before it until polls come back empty for `quiet_s`.
    """
    from confluent_kafka import TopicPartition

    consumer = _consumer(config, f"pilake-endprobe-{uuid.uuid4()}")
    try:
        meta = consumer.list_topics(config.raw_topic, timeout=10)
        topic = meta.topics.get(config.raw_topic)
        if topic is None or topic.error is not None:
            raise StreamJobError(f"raw topic {config.raw_topic!r} not found: {topic and topic.error}")
        ends: dict[int, int] = {}
        assign = []
        for p in sorted(topic.partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(config.raw_topic, p), timeout=10)
            ends[p] = max(int(high), 0)
            if high > low:
                # high-1 is where the last batch starts; a margin costs a few re-read records
                assign.append(TopicPartition(config.raw_topic, p, max(int(low), int(high) - 8)))
        if assign:
            consumer.assign(assign)
            quiet_since = time.monotonic()
            while time.monotonic() - quiet_since < quiet_s:
                msgs = consumer.consume(num_messages=500, timeout=0.2)
                for m in msgs:
                    if m.error() is None:
                        ends[m.partition()] = max(ends[m.partition()], m.offset() + 1)
                if msgs:
                    quiet_since = time.monotonic()
        return ends
    finally:
        consumer.close()


def committed_offsets(config: StreamJobConfig, partitions: list[int]) -> dict[int, int]:
    """Offsets the job's consumer group has committed (where this run starts); -1 if none."""
    from confluent_kafka import TopicPartition

    consumer = _consumer(config, config.group_id)
    try:
        tps = consumer.committed([TopicPartition(config.raw_topic, p) for p in partitions], timeout=10)
        return {tp.partition: (tp.offset if tp.offset >= 0 else -1) for tp in tps}
    finally:
        consumer.close()


# -- logs -----------------------------------------------------------------------------------
def python_error(text: str, *, frames: int = 14) -> str | None:
    """The last Python traceback in `text`, cut to its innermost frames and the exception line.

    Beam's worker tracebacks run 40+ frames deep before reaching our code, and Java stack lines
    follow them; the reason is at the end of the Python part.
    """
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if "Traceback (most recent call last)" in line]
    if not starts:
        return None
    block: list[str] = []
    seen_exception_line = False
    for line in lines[starts[-1] + 1 :]:
        if line.startswith("\tat ") or (seen_exception_line and not line.strip()):
            break
        if line and not line[0].isspace():
            seen_exception_line = True
        block.append(line)
    head = lines[starts[-1]].strip()
    return "\n".join([head, "  ...", *block[-frames:]])


def log_tail(log_dir: Path, *, lines: int = 40, max_chars: int = 6000) -> str:
    """The Python error (else the last lines) of the newest Flink/Python worker logs."""
    files = sorted(log_dir.glob("*.log"), key=lambda p: p.stat().st_mtime, reverse=True)
    parts = []
    for f in files[:2]:
        text = f.read_text(errors="replace")
        picked = python_error(text) or "\n".join(text.splitlines()[-lines:])
        parts.append(f"--- {f} ---\n{picked}")
    out = "\n".join(parts) or f"(no *.log files in {log_dir})"
    return out[-max_chars:]


# -- driver ---------------------------------------------------------------------------------
def _read_progress(path: Path) -> dict[str, Any]:
    try:
        doc: dict[str, Any] = json.loads(path.read_text())
        return doc
    except (OSError, ValueError):
        return {}


def _report(progress: Mapping[str, Any], elapsed_s: float, startup_s: float) -> StreamReport:
    return StreamReport(
        messages=int(progress.get("messages", 0)),
        episodes_committed=int(progress.get("committed", 0)),
        episodes_duplicate=int(progress.get("duplicates", 0)),
        quarantined=int(progress.get("quarantined", 0)),
        incomplete=int(progress.get("incomplete", 0)),
        bytes_in=int(progress.get("bytes", 0)),
        elapsed_s=elapsed_s,
        startup_s=startup_s,
        busy_s=max(0, int(progress.get("last_activity_ns", 0)) - int(progress.get("first_activity_ns", 0)))
        / 1e9,
    )


def _build_job(config: StreamJobConfig) -> Any:
    """Set up the environment and the job graph; returns the StreamExecutionEnvironment."""
    from pi_jobs.connector_jars import ensure_connector_jars

    jars = ensure_connector_jars(config.jar_dir)
    import pyflink.java_gateway

    config.log_dir.mkdir(parents=True, exist_ok=True)
    # FLINK_LOG_DIR is read once, when the JVM gateway starts (the first job of this process):
    # logs go under work_dir rather than into site-packages/pyflink/log. A later job in the
    # same process shares that JVM and so its log dir; `_effective_log_dir` says which.
    if pyflink.java_gateway._gateway is None:
        os.environ["FLINK_LOG_DIR"] = str(config.log_dir.absolute())
    # numpy in the worker was 3x slower under core contention with OpenBLAS threads.
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    # Process mode: thread mode (pemja) hits a PyFlink bug, and loopback mode would run the
    # Python functions inside this driver process.
    os.environ["_python_worker_execution_mode"] = "process"  # noqa: SIM112 - PyFlink's own name

    from pyflink.common import Configuration, Types
    from pyflink.datastream import StreamExecutionEnvironment
    from pyflink.table import StreamTableEnvironment

    from pi_jobs._stream_functions import EpisodeSinkFunction, SinkSettings, episode_key
    from pi_jobs.contract import load_registry

    registry = load_registry(config.robots_path)  # a bad registry fails here, not in the worker

    conf = Configuration()
    conf.set_string("python.executable", sys.executable)  # "No module named pyflink" otherwise
    conf.set_string("python.client.executable", sys.executable)
    # 1 MB records: a small bundle keeps the worker's input buffer (and latency) small.
    conf.set_string("python.fn-execution.bundle.size", "8")
    conf.set_string("python.fn-execution.bundle.time", "200")
    # With checkpointing on, Flink otherwise restarts forever and failures look like hangs.
    # failure-rate, not fixed-delay: a job that runs for days survives an occasional failure
    # (a broker restart), while a persistent one (an unwritable lake) still fails within seconds.
    conf.set_string("restart-strategy.type", "failure-rate")
    conf.set_string("restart-strategy.failure-rate.max-failures-per-interval", "3")
    conf.set_string("restart-strategy.failure-rate.failure-rate-interval", "5 min")
    conf.set_string("restart-strategy.failure-rate.delay", "2 s")
    conf.set_string("execution.checkpointing.interval", f"{config.checkpoint_interval_ms} ms")
    conf.set_string("execution.checkpointing.storage", "filesystem")
    conf.set_string("execution.checkpointing.dir", (config.work_dir / "checkpoints").absolute().as_uri())
    conf.set_string("parallelism.default", "1")

    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_parallelism(1)
    env.enable_checkpointing(config.checkpoint_interval_ms)
    env.add_jars(*[p.absolute().as_uri() for p in jars])
    t_env = StreamTableEnvironment.create(env)

    def quote(text: str) -> str:
        return "'" + text.replace("'", "''") + "'"

    options = {
        "connector": "kafka",
        "topic": config.raw_topic,
        "properties.bootstrap.servers": config.bootstrap_servers,
        "properties.group.id": config.group_id,
        "properties.auto.offset.reset": "earliest",
        "scan.startup.mode": "group-offsets",
        # chunks are up to 1 MB: let one fetch carry several
        "properties.max.partition.fetch.bytes": str(16 * 1024 * 1024),
        "key.format": "raw",
        "key.fields": "k",
        "value.format": "raw",
        "value.fields-include": "EXCEPT_KEY",
        # librdkafka names -> the Java client's (sasl.jaas.config, PEM truststore)
        **{f"properties.{k}": v for k, v in java_client_properties(config.client_options).items()},
    }
    with_clause = ",\n".join(f"  {quote(k)} = {quote(v)}" for k, v in options.items())
    t_env.execute_sql(
        "CREATE TEMPORARY TABLE pilake_raw (\n"
        "  `k` BYTES,\n"
        "  `v` BYTES,\n"
        "  `kpartition` INT METADATA FROM 'partition' VIRTUAL,\n"
        "  `koffset` BIGINT METADATA FROM 'offset' VIRTUAL\n"
        f") WITH (\n{with_clause}\n)"
    )
    settings = SinkSettings(
        bootstrap_servers=config.bootstrap_servers,
        lake_root=config.lake_root,
        catalog_path=config.catalog_path,
        raw_topic=config.raw_topic,
        ack_topic=config.ack_topic,
        progress_path=str(config.progress_path.absolute()),
        featurize=config.featurize,
        client_options=dict(config.client_options),
        registry=registry,
        incomplete_timeout_ms=round(config.incomplete_timeout_s * 1000),
    )
    stream = t_env.to_data_stream(t_env.from_path("pilake_raw"))
    (
        stream.key_by(episode_key, key_type=Types.STRING())
        .process(EpisodeSinkFunction(settings), output_type=Types.STRING())
        .name("pilake-lake-sink")
        .print()  # PyFlink needs a sink; the lake sink emits nothing, so this prints nothing
    )
    return env


def _effective_log_dir(config: StreamJobConfig) -> Path:
    """Where this process's Flink JVM writes its logs (see `_build_job`)."""
    env = os.environ.get("FLINK_LOG_DIR")
    return Path(env) if env else config.log_dir


def _failure_cause(client: Any) -> str:
    """The job's exception, Python worker traceback included, from the job result."""
    try:
        client.get_job_execution_result().result()
    except Exception as err:
        # The Java chain is long; the Python traceback's end holds the reason.
        return python_error(str(err)) or str(err)[-4000:]
    return "(the job result holds no exception)"


def _job_status(client: Any) -> str:
    return str(client.get_job_status().result()).rsplit(".", 1)[-1].upper()


def _cancel(client: Any) -> None:
    try:
        client.cancel().result()
    except Exception as err:  # already finished or failed: nothing left to cancel
        log.debug("cancel: %s", err)


def run_stream_job(
    config: StreamJobConfig,
    *,
    until_idle: bool,
    idle_timeout_s: float = 5.0,
    max_runtime_s: float | None = None,
) -> StreamReport:
    """Run the stream job on the local Flink mini-cluster.

    Args:
        config: topics, lake, catalog, working dir.
        until_idle: stop once every record of the raw topic (up to its true end) is processed
            and nothing new arrived for `idle_timeout_s`.
        idle_timeout_s: quiet time that counts as idle.
        max_runtime_s: stop after this long in any case (None: until idle or Ctrl-C).

    Returns:
        Counts and timing of this run.

    Raises:
        StreamJobError: the job failed (after its bounded restarts); the message names the log
            directory and quotes the worker's error.

    Example:
        >>> report = run_stream_job(config, until_idle=True)
        >>> report.episodes_committed
        6
    """
    if idle_timeout_s <= 0:
        raise ValueError(f"idle_timeout_s must be > 0, got {idle_timeout_s}")
    if max_runtime_s is not None and max_runtime_s <= 0:
        raise ValueError(f"max_runtime_s must be > 0 or None, got {max_runtime_s}")
    t0 = time.monotonic()
    config.work_dir.mkdir(parents=True, exist_ok=True)
    progress_path = config.progress_path
    progress_path.unlink(missing_ok=True)  # counts are per run

    start_offsets: dict[int, int] = {}
    ends: dict[int, int] = {}
    if until_idle:
        ends = true_end_offsets(config)
        start_offsets = committed_offsets(config, sorted(ends))
    env = _build_job(config)
    client = env.execute_async("pilake-stream")
    startup_s = 0.0
    log.info("stream job %s submitted; logs in %s", client.get_job_id(), _effective_log_dir(config))

    last_messages = -1
    last_change = time.monotonic()
    last_log = time.monotonic()
    last_log_bytes = 0
    progress: dict[str, Any] = {}
    ends_checked_at = time.monotonic()
    try:
        while True:
            time.sleep(0.25)
            try:
                status = _job_status(client)
            except Exception as err:
                # Once a job has failed for good, the local mini-cluster may already have
                # dropped it: the status call itself then throws. Report it as the failure it is.
                log.debug("job status unavailable, treating the job as failed: %s", str(err)[:500])
                status = "FAILED"
            if status in ("FAILED", "FAILING"):
                log_dir = _effective_log_dir(config)
                cause = _failure_cause(client)
                # the job result usually carries the worker's traceback; else quote the logs
                detail = cause if "Traceback" in cause else f"{cause}\n{log_tail(log_dir)}"
                raise StreamJobError(f"stream job failed; logs in {log_dir}\n{detail}")
            if status in ("CANCELED", "FINISHED"):
                raise StreamJobError(f"stream job stopped by itself ({status}); logs in {config.log_dir}")
            if status == "RUNNING" and not startup_s:
                startup_s = time.monotonic() - t0
                log.info("stream job running after %.1f s", startup_s)
            progress = _read_progress(progress_path) or progress
            now = time.monotonic()
            messages = int(progress.get("messages", 0))
            if messages != last_messages:
                last_messages, last_change = messages, now
            if now - last_log >= 5.0:
                bytes_in = int(progress.get("bytes", 0))
                log.info(
                    "stream: %d messages, %d episodes committed, %d duplicate, %d quarantined, "
                    "%d incomplete, %.1f MB/s",
                    messages,
                    int(progress.get("committed", 0)),
                    int(progress.get("duplicates", 0)),
                    int(progress.get("quarantined", 0)),
                    int(progress.get("incomplete", 0)),
                    (bytes_in - last_log_bytes) / 1e6 / (now - last_log),
                )
                last_log, last_log_bytes = now, bytes_in
            if max_runtime_s is not None and now - t0 >= max_runtime_s:
                log.info("stream: max_runtime_s=%s reached, stopping", max_runtime_s)
                break
            if until_idle and now - last_change >= idle_timeout_s:
                incomplete = int(progress.get("incomplete", 0))
                # Incomplete episodes live in the sink's memory only: stopping now would lose
                # their chunks (offsets move on). Wait for their timeout to quarantine them
                # (and keep their raw bytes); bounded in case no timer fires.
                if incomplete and now - last_change < config.incomplete_timeout_s + idle_timeout_s + 10:
                    continue
                if not _caught_up(progress, ends, start_offsets):
                    if now - ends_checked_at > 10 * idle_timeout_s and status == "RUNNING":
                        log.info(
                            "stream: waiting for offsets %s, processed %s", ends, progress.get("offsets")
                        )
                        ends_checked_at = now
                    continue
                # Caught up with the ends we knew; new records may have arrived since.
                ends = true_end_offsets(config)
                ends_checked_at = time.monotonic()
                progress = _read_progress(progress_path) or progress
                if _caught_up(progress, ends, start_offsets):
                    _wait_for_commit(config, ends)
                    break
    except KeyboardInterrupt:
        log.info("stream: interrupted, cancelling the job")
    finally:
        _cancel(client)
    progress = _read_progress(progress_path) or progress
    report = _report(progress, time.monotonic() - t0, startup_s)
    log.info(
        "stream: done, %d messages, %d committed, %.1f MB/s over %.1f s (startup %.1f s); "
        "%.1f MB/s while busy",
        report.messages,
        report.episodes_committed,
        report.mb_per_s,
        report.elapsed_s,
        report.startup_s,
        report.busy_mb_per_s,
    )
    return report


def _wait_for_commit(config: StreamJobConfig, ends: Mapping[int, int]) -> None:
    """Wait until the job's group has committed the true end offsets (Flink commits them when
    a checkpoint completes), so the next run starts after them.

    A fixed wait of one checkpoint interval was not enough here: Flink's first offset commit to
    a new group took several seconds. On timeout the next run re-reads some records, which is
    harmless (decision 3), so this only logs.
    """
    timeout_s = max(15.0, 5 * config.checkpoint_interval_ms / 1000)
    deadline = time.monotonic() + timeout_s
    wanted = {p: end for p, end in ends.items() if end > 0}
    while True:
        committed = committed_offsets(config, sorted(wanted))
        if all(committed.get(p, -1) >= end for p, end in wanted.items()):
            return
        if time.monotonic() >= deadline:
            log.warning(
                "stream: offsets not committed within %.0f s (committed %s, ends %s); the next run "
                "re-reads the rest, which is harmless",
                timeout_s,
                committed,
                wanted,
            )
            return
        time.sleep(0.5)


def _caught_up(progress: Mapping[str, Any], ends: Mapping[int, int], start: Mapping[int, int]) -> bool:
    done: Mapping[str, int] = progress.get("offsets", {})
    for p, end in ends.items():
        processed = max(int(done.get(str(p), -1)) + 1, start.get(p, -1))
        if end > 0 and processed < end:
            return False
    return True
