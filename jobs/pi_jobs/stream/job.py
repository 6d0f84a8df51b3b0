"""The stream job's graph: the Kafka source table, key by episode, the lake sink.

Job graph (at `StreamJobConfig.parallelism`): Table API Kafka source (`value.format=raw`, key, partition and
offset as columns) -> `to_data_stream` -> key_by(episode_id) -> `EpisodeSinkFunction`
(pi_jobs.stream._sink). `pi_jobs.stream.driver` submits it and watches it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from pi_jobs.errors import StreamJobError
from pi_jobs.kafka_security import java_client_properties
from pi_jobs.stream.config import StreamJobConfig

# Restarts in a row (fewer than 10 healthy minutes apart) before the job fails for good.
RESTART_ATTEMPTS = 3


def build_job(config: StreamJobConfig) -> Any:
    """Set up the environment and the job graph; returns the StreamExecutionEnvironment."""
    from pi_jobs.stream.connector_jars import ensure_connector_jars

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

    from pi_jobs.stream._records import episode_key
    from pi_jobs.stream._sink import EpisodeSinkFunction, SinkSettings
    from pi_jobs.stream.contract import load_registry

    registry = load_registry(config.robots_path)  # a bad registry fails here, not in the worker
    from pi_format import LakeLayout
    from pi_format.lake import ensure_lake_tables

    # once, here: parallel sink subtasks creating tables at once race on metadata commits
    try:
        ensure_lake_tables(LakeLayout(config.lake_root))
    except Exception as err:  # deltalake's TableNotFoundError, OSError, ...
        raise StreamJobError(
            f"stream job failed before it started: cannot create or open the lake's tables under "
            f"{config.lake_root}: {err}; check that the lake root is a writable directory or URI "
            f"(logs in {config.log_dir.absolute()})"
        ) from err

    conf = Configuration()
    conf.set_string("python.executable", sys.executable)  # "No module named pyflink" otherwise
    conf.set_string("python.client.executable", sys.executable)
    # 1 MB records: a small bundle keeps the worker's input buffer (and latency) small.
    conf.set_string("python.fn-execution.bundle.size", "8")
    conf.set_string("python.fn-execution.bundle.time", "200")
    # With checkpointing on, Flink otherwise restarts forever and failures look like hangs.
    # Exponential delay with a bounded number of attempts: the job fails after RESTART_ATTEMPTS
    # restarts in a row, each failure following the last restart by less than the reset
    # threshold. A job that runs for days survives an occasional failure (a broker restart: the
    # count resets after 10 healthy minutes), while a persistent one (an unwritable lake) fails
    # after the same number of attempts however slowly a loaded machine restarts. failure-rate
    # (3 per 5 min) did not: on a busy CI machine 4 failures took longer than 5 minutes.
    conf.set_string("restart-strategy.type", "exponential-delay")
    conf.set_string("restart-strategy.exponential-delay.attempts-before-reset-backoff", str(RESTART_ATTEMPTS))
    conf.set_string("restart-strategy.exponential-delay.reset-backoff-threshold", "10 min")
    conf.set_string("restart-strategy.exponential-delay.initial-backoff", "2 s")
    conf.set_string("restart-strategy.exponential-delay.backoff-multiplier", "2.0")
    conf.set_string("restart-strategy.exponential-delay.max-backoff", "30 s")
    conf.set_string("restart-strategy.exponential-delay.jitter-factor", "0.1")
    conf.set_string("execution.checkpointing.interval", f"{config.checkpoint_interval_ms} ms")
    conf.set_string("execution.checkpointing.storage", "filesystem")
    conf.set_string("execution.checkpointing.dir", (config.work_dir / "checkpoints").absolute().as_uri())
    conf.set_string("parallelism.default", str(config.parallelism))
    # one slot per parallel subtask on the local mini-cluster
    conf.set_string("taskmanager.numberOfTaskSlots", str(config.parallelism))

    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_parallelism(config.parallelism)
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
        group_commit_max_episodes=config.group_commit_max_episodes,
        group_commit_delay_ms=config.group_commit_delay_ms,
        writer_prefix=config.group_id,
    )
    stream = t_env.to_data_stream(t_env.from_path("pilake_raw"))
    (
        stream.key_by(episode_key, key_type=Types.STRING())
        .process(EpisodeSinkFunction(settings), output_type=Types.STRING())
        .name("pilake-lake-sink")
        .print()  # PyFlink needs a sink; the lake sink emits nothing, so this prints nothing
    )
    return env


def effective_log_dir(config: StreamJobConfig) -> Path:
    """Where this process's Flink JVM writes its logs (see `build_job`)."""
    env = os.environ.get("FLINK_LOG_DIR")
    return Path(env) if env else config.log_dir
