"""What the stream sink needs inside the Flink worker: `SinkSettings`, pickled into the job."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from pi_format import AckRoutes

from pi_jobs.stream.contract import RobotRegistry
from pi_jobs.stream.featurize import FeaturizeConfig
from pi_jobs.stream.limits import StreamLimits

# Default of SinkSettings.incomplete_timeout_ms (see StreamJobConfig.incomplete_timeout_s).
DEFAULT_INCOMPLETE_TIMEOUT_MS = 60_000


@dataclass(frozen=True, slots=True)
class SinkSettings:
    """What the worker-side sink needs; pickled into the Flink job."""

    bootstrap_servers: str
    lake_root: str
    catalog_path: str
    raw_topic: str
    # the ack topic, or routes to a topic per robot fleet (pi_format.AckRoutes)
    ack_topic: str | AckRoutes
    progress_path: str
    featurize: FeaturizeConfig
    # Kafka security settings (SASL passwords): kept out of the repr so they are never logged.
    client_options: Mapping[str, str] = field(default_factory=dict, repr=False)
    # The robot registry the contract checks against; None: the one shipped with pi_jobs.
    registry: RobotRegistry | None = None
    # An episode with no new chunk for this long (processing time) is quarantined as
    # incomplete_timeout; its chunks are kept in raw.
    incomplete_timeout_ms: int = DEFAULT_INCOMPLETE_TIMEOUT_MS
    # Group commit bounds (SPEC.md §7.8): commit when this many episodes are waiting, when no
    # message came for group_commit_delay_ms (the input is drained), or when the oldest has
    # waited group_commit_max_wait_ms (or the delay, if longer) while messages kept coming
    # (StreamJobConfig says why 200 ms and 2 s).
    group_commit_max_episodes: int = 32
    group_commit_delay_ms: int = 200
    group_commit_max_wait_ms: int = 2000
    # Writer identities are f"{writer_prefix}-{subtask index}" (unique per job and subtask).
    writer_prefix: str = "pilake-stream"
    # JSON event logs (pi_format.jsonlog, read by `pilake trace`): one file per worker process
    # in this directory; "" = none.
    event_log_dir: str = ""
    # Prometheus /metrics of each worker on the first free port of [first, last]; None = off.
    metrics_ports: tuple[int, int] | None = None
    # How long a lake commit or catalog record is retried while its server is unreachable
    # (pi_jobs.stream._retry); StreamJobConfig.dependency_retry_s says why 120 s.
    dependency_retry_s: float = 120.0
    # What one subtask may hold in memory, whatever arrives (pi_jobs.stream.limits says why
    # each default).
    limits: StreamLimits = field(default_factory=StreamLimits)
