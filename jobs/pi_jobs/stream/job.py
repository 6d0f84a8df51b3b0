"""The stream job's graph: the Kafka source table, key by episode, the lake sink.

Job graph (at `StreamJobConfig.parallelism`): Table API Kafka source (`value.format=raw`, key, partition and
offset as columns) -> SQL `(episode key, record)` -> `to_data_stream` -> keyBy in the JVM
(pi_jobs.stream._keying) -> `EpisodeSinkFunction`
(pi_jobs.stream._sink). `pi_jobs.stream.driver` submits it and watches it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from pi_jobs.errors import StreamJobError
from pi_jobs.kafka_security import java_client_properties
from pi_jobs.stream._jvm_tmp import with_jvm_tmp_dir
from pi_jobs.stream.config import StreamJobConfig

# Restarts in a row (fewer than 10 healthy minutes apart) before the embedded job fails for good
# (StreamJobConfig.restart_attempts; a deployed job never gives up).
RESTART_ATTEMPTS = 3
# Flink's "attempts before reset" for a job that never gives up: Java's Integer.MAX_VALUE.
UNBOUNDED_ATTEMPTS = 2**31 - 1
# JVM flags of the embedded mini-cluster (the PyFlink gateway JVM) when JVM_ARGS is unset.
# C1 only (no C2): per-thread CPU of the stream job showed C2's compiler threads spending about
# half of the JVM's CPU during the first minutes of ingest (0.63 of 1.24 s over 12 episodes after
# a warm-up one: ~50 ms per episode, ~7% of ingest), still compiling while idle. The JVM's own
# work here is moving bytes between Kafka and the Python worker, which C1 code does as fast as
# C2's in the same measurement (benchmarks/ingest/PROFILE.md, fourth pass).
EMBEDDED_JVM_ARGS = "-XX:TieredStopAtLevel=1"


def build_job(config: StreamJobConfig) -> Any:
    """Set up the environment and the job graph; returns the StreamExecutionEnvironment."""
    from pi_jobs.stream.connector_jars import ensure_connector_jars

    jars = ensure_connector_jars(config.jar_dir)
    prepare_python_workers(config.log_dir)

    from pyflink.common import Types
    from pyflink.datastream import StreamExecutionEnvironment
    from pyflink.table import StreamTableEnvironment

    from pi_jobs.stream._keying import key_by_in_jvm
    from pi_jobs.stream._sink import EpisodeSinkFunction
    from pi_jobs.stream._sink_settings import SinkSettings
    from pi_jobs.stream.contract import load_registry

    registry = load_registry(config.robots_path)  # a bad registry fails here, not in the worker
    from pi_format import AckRoutes, LakeLayout
    from pi_format.jsonlog import EVENT_LOG_DIR_ENV
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

    conf = python_worker_configuration(config.restart_attempts)
    if config.python_execution_mode == "thread":
        use_thread_mode(conf)
    conf.set_string("execution.checkpointing.interval", f"{config.checkpoint_interval_ms} ms")
    conf.set_string("execution.checkpointing.storage", "filesystem")
    checkpoint_dir = config.checkpoint_dir or (config.work_dir / "checkpoints").absolute().as_uri()
    conf.set_string("execution.checkpointing.dir", checkpoint_dir)
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
        "  `koffset` BIGINT METADATA FROM 'offset' VIRTUAL,\n"
        # the producer's send time: the "last published" end of `pilake freshness`
        "  `ktimestamp` TIMESTAMP_LTZ(3) METADATA FROM 'timestamp' VIRTUAL\n"
        f") WITH (\n{with_clause}\n)"
    )
    settings = SinkSettings(
        bootstrap_servers=config.bootstrap_servers,
        lake_root=config.lake_root,
        catalog_path=config.catalog_path,
        raw_topic=config.raw_topic,
        ack_topic=AckRoutes.parse(config.ack_routes, default=config.ack_topic),  # a topic per fleet
        progress_path=str(config.progress_path.absolute()),
        featurize=config.featurize,
        client_options=dict(config.client_options),
        registry=registry,
        incomplete_timeout_ms=round(config.incomplete_timeout_s * 1000),
        group_commit_max_episodes=config.group_commit_max_episodes,
        group_commit_delay_ms=config.group_commit_delay_ms,
        group_commit_max_wait_ms=config.group_commit_max_wait_ms,
        writer_prefix=config.group_id,
        event_log_dir=os.environ.get(EVENT_LOG_DIR_ENV, ""),  # JSON event logs (pilake trace)
        metrics_ports=config.metrics_ports,
        dependency_retry_s=config.dependency_retry_s,
        limits=config.limits,
    )
    (
        # keyed in the JVM (SQL key expression): no Python operator in front of the sink
        key_by_in_jvm(t_env, "pilake_raw")
        .process(EpisodeSinkFunction(settings), output_type=Types.STRING())
        .name("pilake-lake-sink")
        # fixed uids: a savepoint's keyed state (episodes being assembled) maps back onto these
        # operators after the job graph changes (Flink derives ids from the graph otherwise)
        .uid("pilake-lake-sink")
        .print()  # PyFlink needs a sink; the lake sink emits nothing, so this prints nothing
        .uid("pilake-print-sink")
    )
    return env


def prepare_python_workers(log_dir: Path) -> None:
    """The process environment every pi-lake Flink job (stream, backfill) needs before its
    environment is created: Flink's log dir, the embedded JVM's flags (`EMBEDDED_JVM_ARGS`) and
    temporary directory (`log_dir`'s sibling `jvm-tmp/<pid>`, removed at exit), one OpenBLAS
    thread, process mode."""
    import pyflink.java_gateway

    log_dir.mkdir(parents=True, exist_ok=True)
    # FLINK_LOG_DIR is read once, when the JVM gateway starts (the first job of this process):
    # logs go under work_dir rather than into site-packages/pyflink/log. A later job in the
    # same process shares that JVM and so its log dir; `_effective_log_dir` says which.
    if pyflink.java_gateway._gateway is None:
        os.environ["FLINK_LOG_DIR"] = str(log_dir.absolute())
        # read by PyFlink's gateway launcher; a JVM_ARGS of the user's own is left as it is,
        # but for a temporary directory of this run's own, removed when it ends (pi_jobs.stream._jvm_tmp)
        jvm_args = os.environ.get("JVM_ARGS", EMBEDDED_JVM_ARGS)
        os.environ["JVM_ARGS"] = with_jvm_tmp_dir(jvm_args, log_dir.parent / "jvm-tmp")
    # numpy in the worker was 3x slower under core contention with OpenBLAS threads.
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    # Process workers, not loopback (which would run the Python functions inside this driver
    # process). The stream job's thread mode (`use_thread_mode`) is set in its configuration.
    os.environ["_python_worker_execution_mode"] = "process"  # noqa: SIM112 - PyFlink's own name


def python_worker_configuration(restart_attempts: int | None = RESTART_ATTEMPTS) -> Any:
    """A pyflink Configuration with the Python worker settings and the restart strategy every
    pi-lake Flink job (stream, backfill) uses: `restart_attempts` restarts in a row, or None
    for a job that never gives up (a deployed stream job)."""
    from pyflink.common import Configuration

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
    # A deployed job (None) retries forever at the 30 s max back-off: a dependency that is down
    # longer than the sink's own retries (StreamJobConfig.dependency_retry_s) must not end it.
    attempts = UNBOUNDED_ATTEMPTS if restart_attempts is None else restart_attempts
    conf.set_string("restart-strategy.type", "exponential-delay")
    conf.set_string("restart-strategy.exponential-delay.attempts-before-reset-backoff", str(attempts))
    conf.set_string("restart-strategy.exponential-delay.reset-backoff-threshold", "10 min")
    conf.set_string("restart-strategy.exponential-delay.initial-backoff", "2 s")
    conf.set_string("restart-strategy.exponential-delay.backoff-multiplier", "2.0")
    conf.set_string("restart-strategy.exponential-delay.max-backoff", "30 s")
    conf.set_string("restart-strategy.exponential-delay.jitter-factor", "0.1")
    return conf


def use_thread_mode(conf: Any) -> None:
    """Run the job's Python functions inside the TaskManager JVM (PyFlink's thread mode, PEMJA)
    instead of a Beam worker process: no gRPC data channel, no bundles, no second process.

    The embedded interpreter is the one `python.executable` names but does not read this
    environment's `.pth` files, so the editable pi-lake packages' source roots and this
    process's `sys.path` are given to it as `python.pythonpath`.
    """
    import importlib.util

    roots = []
    for name in ("pi_format", "pi_jobs", "pi_catalog", "pi_ingest", "pi_loader"):
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations:
            roots.append(str(Path(next(iter(spec.submodule_search_locations))).parent))
    paths = dict.fromkeys([*roots, *(p for p in sys.path if p)])  # in order, once each
    conf.set_string("python.execution-mode", "thread")
    conf.set_string("python.pythonpath", os.pathsep.join(paths))


def effective_log_dir(config: StreamJobConfig) -> Path:
    """Where this process's Flink JVM writes its logs (see `build_job`)."""
    env = os.environ.get("FLINK_LOG_DIR")
    return Path(env) if env else config.log_dir


def config_to_json(config: StreamJobConfig) -> str:
    """The config as JSON, for a job submitted with `flink run` (`run_submitted` reads it back).

    It includes `client_options`, which may hold credentials: write it to a private file.

    Example:
        >>> config_from_json(config_to_json(config)) == config
        True
    """
    import dataclasses
    import json

    # field by field: asdict deep-copies, and client_options may be a read-only mappingproxy
    doc = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
    doc["work_dir"], doc["jar_dir"] = str(config.work_dir), str(config.jar_dir)
    doc["client_options"] = dict(config.client_options)
    doc["featurize"] = dataclasses.asdict(config.featurize)
    doc["limits"] = dataclasses.asdict(config.limits)
    return json.dumps(doc)


def config_from_json(text: str) -> StreamJobConfig:
    """The config `config_to_json` wrote.

    Raises:
        StreamJobError: the text is not such a config (names the missing or unknown field).
    """
    import json

    from pi_jobs.stream.featurize import FeaturizeConfig
    from pi_jobs.stream.limits import StreamLimits

    try:
        doc = json.loads(text)
        doc["featurize"] = FeaturizeConfig(**doc["featurize"])
        if "limits" in doc:  # a config written before the limits existed: the defaults
            doc["limits"] = StreamLimits(**doc["limits"])
        return StreamJobConfig(**doc)
    except (ValueError, KeyError, TypeError) as err:
        raise StreamJobError(f"not a stream job config written by config_to_json: {err}") from err


def submitted_job_name(config: StreamJobConfig) -> str:
    """The name of the job on a session cluster: one consumer group, one running job (its sink
    subtasks' writer ids derive from the group, and two writers must never share one)."""
    return f"pilake-stream[{config.group_id}]"


def run_submitted(config_path: str) -> str:
    """Build the job from a config file and hand it to the cluster `flink run` submits to.

    This is the body of the launcher that `pilake stream --cluster` gives `flink run -py`
    (pi_jobs.local.flink_cluster): in that process the execution environment is the cluster's,
    so `execute_async` submits the same graph the embedded driver runs. Returns the job id.

    Example:
        >>> run_submitted("/home/me/.pilake/flink/submit/config.json")
        'a1b2c3...'
    """
    config = config_from_json(Path(config_path).read_text())
    client = build_job(config).execute_async(submitted_job_name(config))
    job_id = str(client.get_job_id())
    # `flink run` prints it too, but this line is the one pi_jobs.local.flink_cluster parses.
    print(f"pilake-stream job id: {job_id}", flush=True)
    return job_id
