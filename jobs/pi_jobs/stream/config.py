"""What the stream job is told (`StreamJobConfig`) and what one run reports (`StreamReport`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pi_format

from pi_jobs.settings import Settings
from pi_jobs.stream.featurize import FeaturizeConfig
from pi_jobs.stream.limits import StreamLimits


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
    # Acks of fleets that must read only their own: "<episode_id prefix>=<fleet>,..." sends the
    # ack of a matching episode to episodes.ack.v1.<fleet> instead of ack_topic
    # (pi_format.AckRoutes; setting stream.ack_routes). "" = every ack to ack_topic.
    ack_routes: str = ""
    # one group per lake: its committed offsets say where the next run resumes
    group_id: str = "pilake-stream"
    # 2 s: offsets are committed to Kafka on checkpoints, so this bounds what a restart re-reads
    # (re-reads are harmless, decision 3) and how long `until_idle` waits after the last record.
    checkpoint_interval_ms: int = 2000
    # Checkpoint storage URI (s3://... on a cluster, where every TaskManager must reach it);
    # "" = <work_dir>/checkpoints on the local filesystem.
    checkpoint_dir: str = ""
    featurize: FeaturizeConfig = field(default_factory=FeaturizeConfig)
    client_options: Mapping[str, str] = field(default_factory=dict)
    # The robot registry file of the ingest contract (pi_jobs.stream.contract); "" = the packaged one.
    robots_path: str = ""
    # An episode with no new chunk for this long is quarantined as incomplete_timeout (its
    # chunks kept in raw). 60 s: far above the gaps between chunks of one upload, below the
    # uploader's 120 s re-send, and `until_idle` waits for it when episodes are incomplete.
    incomplete_timeout_s: float = 60.0
    # Parallel sink subtasks (each its own lake writer). 1 on a laptop; a host with spare cores
    # runs 2+ (benchmarks/ingest measures the speed-up).
    parallelism: int = 1
    # Group commit bounds (SPEC.md §7.8): up to this many episodes per Delta commit; the group
    # commits once the input has been quiet for group_commit_delay_ms (no message came meanwhile:
    # nothing more is queued behind it), or when its oldest episode has waited
    # group_commit_max_wait_ms (at least the delay) while messages kept coming. 200 ms: the gap
    # between two messages of a queued burst is a few ms, so a quiet 200 ms means the input is
    # drained. 2 s under load: a busy worker featurizes an episode every ~0.5 s on 2 cores, so
    # groups of ~4 (the commit and catalog record cost ~40 CPU ms per episode alone, ~15 in
    # fours; benchmarks/ingest/PROFILE.md) for at most 2 s more before an ack.
    group_commit_max_episodes: int = 32
    group_commit_delay_ms: int = 200
    group_commit_max_wait_ms: int = 2000
    # Each sink worker serves Prometheus /metrics on the first free port of (first, last);
    # None = off (pi_jobs.stream._metrics).
    metrics_ports: tuple[int, int] | None = None
    # A lake commit or catalog record whose server is unreachable is retried with back-off for
    # this long before the task fails (pi_jobs.stream._retry). 120 s: an object store's or
    # ClickHouse's restart (seconds to a minute) passes without a job restart.
    dependency_retry_s: float = 120.0
    # Job restarts in a row (fewer than 10 healthy minutes apart) before the job fails for good;
    # None = never give up (how a deployed job runs: the launcher and session-cluster
    # submissions). 3 for the embedded `pilake stream`, which should fail loudly on a broken lake.
    restart_attempts: int | None = 3
    # What one sink subtask may hold in memory, whatever arrives: bytes per episode, chunks per
    # episode, episodes per key and per subtask, bytes per subtask (pi_jobs.stream.limits says
    # why each default; SPEC.md 9.5).
    limits: StreamLimits = field(default_factory=StreamLimits)
    # Where the sink's Python runs: "process" (a Beam worker process fed over gRPC, PyFlink's
    # default) or "thread" (inside the TaskManager JVM through PEMJA; experimental: one benchmark
    # run wedged its JVM at a checkpoint; benchmarks/ingest/PROFILE.md).
    python_execution_mode: str = "process"

    def __post_init__(self) -> None:
        if not self.bootstrap_servers:
            raise ValueError("bootstrap_servers must be 'host:port[,host:port]', got ''")
        if not self.lake_root:
            raise ValueError("lake_root must be a path or URI, got ''")
        if not 0.1 <= self.incomplete_timeout_s <= 7 * 24 * 3600:
            raise ValueError(
                f"incomplete_timeout_s must be in [0.1, 604800] seconds, got {self.incomplete_timeout_s}"
            )
        if not 1 <= self.parallelism <= 64:
            raise ValueError(f"parallelism must be in [1, 64], got {self.parallelism}")
        if self.group_commit_max_episodes < 1:
            raise ValueError(f"group_commit_max_episodes must be >= 1, got {self.group_commit_max_episodes}")
        if not 0 <= self.group_commit_delay_ms <= 60_000:
            raise ValueError(f"group_commit_delay_ms must be in [0, 60000], got {self.group_commit_delay_ms}")
        if not 0 <= self.group_commit_max_wait_ms <= 600_000:
            raise ValueError(
                f"group_commit_max_wait_ms must be in [0, 600000], got {self.group_commit_max_wait_ms}"
            )
        if not 0 <= self.dependency_retry_s <= 3600:
            raise ValueError(
                f"dependency_retry_s must be in [0, 3600] seconds, got {self.dependency_retry_s}"
            )
        if self.restart_attempts is not None and self.restart_attempts < 1:
            raise ValueError(
                f"restart_attempts must be >= 1 or None (never give up), got {self.restart_attempts}"
            )
        if self.python_execution_mode not in ("process", "thread"):
            raise ValueError(
                f"python_execution_mode must be 'process' or 'thread', got {self.python_execution_mode!r}"
            )
        if self.checkpoint_interval_ms < 100:
            raise ValueError(f"checkpoint_interval_ms must be >= 100, got {self.checkpoint_interval_ms}")
        for name in ("raw_topic", "ack_topic", "group_id"):
            if not getattr(self, name):
                raise ValueError(f"{name} must be non-empty")
        pi_format.AckRoutes.parse(self.ack_routes, default=self.ack_topic)  # a bad route fails here
        object.__setattr__(self, "work_dir", Path(self.work_dir))
        if self.metrics_ports is not None:  # a list after a JSON round trip
            first, last = (int(p) for p in self.metrics_ports)
            if not 1 <= first <= last <= 65535:
                raise ValueError(
                    f"metrics_ports must be (first, last) with 1 <= first <= last <= 65535, "
                    f"got {self.metrics_ports!r}"
                )
            object.__setattr__(self, "metrics_ports", (first, last))
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
        """Base name of the progress files: each sink subtask i writes progress-{i}.json."""
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


def stream_config(settings: Settings) -> StreamJobConfig:
    """The stream job's configuration for an installation (`pi_jobs.Settings`).

    Example:
        >>> stream_config(Settings.from_env()).lake_root
        '/home/me/.pilake/lake'
    """
    return StreamJobConfig(
        bootstrap_servers=settings.bootstrap_servers,
        lake_root=settings.lake_root,
        catalog_path=settings.catalog_path,
        work_dir=settings.flink_dir,
        jar_dir=settings.jar_dir,
        robots_path=settings.robots_path,
        ack_routes=settings.ack_routes,
        client_options=settings.kafka.options,
        parallelism=settings.parallelism,
        checkpoint_dir=settings.flink_checkpoint_dir,
        metrics_ports=settings.metrics_ports(settings.stream_metrics_port),
    )
