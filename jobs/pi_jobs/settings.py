"""Where a pi-lake installation keeps its state and what it talks to, read once at the edge.

Defaults make the embedded stack work with no configuration: a state dir `./.pilake` holding
the broker's pid and log, the lake, the catalog and the connector jars. A settings file
(`pilake.toml`) and environment variables override them (`pi_jobs.config`, over the key table
`SETTINGS_KEYS` below); `pilake config show` prints the effective values and their sources.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pi_format.topics import AckRoutes, fleet_ack_topic

from pi_jobs.config import ConfigKey, Resolution, parse_bool, parse_first_port, resolve
from pi_jobs.kafka_security import KafkaSecurity

# 19092 rather than Kafka's 9092, so a developer's real Kafka on 9092 is left alone.
DEFAULT_BROKER_PORT = 19092
HOME_ENV = "PILAKE_HOME"

# The configuration: (key in pilake.toml, environment variable, Settings field[, parser], secret?,
# export?). A new setting is a Settings field plus one line here; `pilake config show`, the
# settings-file checks and the deploy manifests' tests all read this table. The home is not a
# key: the file itself may live in it (only PILAKE_HOME sets it). Topic names are not keys
# either: they are part of the wire protocol's version (pi_format.topics).
SETTINGS_KEYS: tuple[ConfigKey, ...] = (
    ConfigKey("kafka.bootstrap_servers", "PILAKE_BOOTSTRAP", "bootstrap_servers"),
    ConfigKey("kafka.broker_port", "PILAKE_BROKER_PORT", "broker_port", int),
    ConfigKey("lake.uri", "PILAKE_LAKE", "lake_root"),
    ConfigKey("catalog.dsn", "PILAKE_CATALOG", "catalog_path"),
    # pi_catalog reads the server credentials from the environment (pi_catalog._connection)
    ConfigKey("catalog.user", "PILAKE_CLICKHOUSE_USER", "clickhouse_user", export=True),
    ConfigKey(
        "catalog.password", "PILAKE_CLICKHOUSE_PASSWORD", "clickhouse_password", secret=True, export=True
    ),
    ConfigKey("stream.robots", "PILAKE_ROBOTS", "robots_path"),
    # acks per robot fleet: "<episode_id prefix>=<fleet>,..." (pi_format.AckRoutes); "" = one topic
    ConfigKey("stream.ack_routes", "PILAKE_ACK_ROUTES", "ack_routes"),
    # the uploader's fleet: it reads acks from episodes.ack.v1.<fleet> ("" = episodes.ack.v1)
    ConfigKey("kafka.fleet", "PILAKE_FLEET", "fleet"),
    ConfigKey("stream.parallelism", "PILAKE_PARALLELISM", "parallelism", int),
    # a Flink session cluster's REST address: `pilake stream` submits there ("" = embedded)
    ConfigKey("flink.rest_url", "PILAKE_FLINK_URL", "flink_rest_url"),
    ConfigKey("flink.checkpoint_dir", "PILAKE_FLINK_CHECKPOINT_DIR", "flink_checkpoint_dir"),
    # Prometheus endpoints (0 = off); `pilake status` scrapes them
    ConfigKey("metrics.uploader_port", "PILAKE_UPLOADER_METRICS_PORT", "uploader_metrics_port", int),
    ConfigKey("metrics.stream_port", "PILAKE_STREAM_METRICS_PORT", "stream_metrics_port", int),
    # pi_loader reads this variable itself and also takes a range "9480-9487" (its first port here)
    ConfigKey("metrics.loader_port", "PILAKE_LOADER_METRICS_PORT", "loader_metrics_port", parse_first_port),
    ConfigKey("metrics.port_range", "PILAKE_METRICS_PORT_RANGE", "metrics_port_range", int),
    # deltalake (the sink, the readers) and pi_loader take S3 settings from the environment
    ConfigKey("s3.endpoint", "AWS_ENDPOINT_URL", "s3_endpoint", export=True),
    ConfigKey("s3.region", "AWS_REGION", "s3_region", export=True),
    ConfigKey("s3.allow_http", "AWS_ALLOW_HTTP", "s3_allow_http", parse_bool, export=True),
    ConfigKey("s3.access_key_id", "AWS_ACCESS_KEY_ID", "s3_access_key_id", secret=True, export=True),
    ConfigKey(
        "s3.secret_access_key", "AWS_SECRET_ACCESS_KEY", "s3_secret_access_key", secret=True, export=True
    ),
)


@dataclass(frozen=True, slots=True)
class Settings:
    """Paths and addresses of one pi-lake installation.

    Example:
        >>> s = Settings.from_env()
        >>> s.lake_root
        '/home/me/project/.pilake/lake'
    """

    home: Path
    broker_port: int = DEFAULT_BROKER_PORT
    bootstrap_servers: str = f"127.0.0.1:{DEFAULT_BROKER_PORT}"
    lake_root: str = ""
    catalog_path: str = ""
    # the robot registry of the ingest contract; "" = the one shipped with pi_jobs
    robots_path: str = ""
    # The robot fleet this host uploads for: its acks come on episodes.ack.v1.<fleet>, the only
    # ack topic its Kafka user may read (deploy/k8s/kafka-users.yaml). "" = the shared
    # episodes.ack.v1 (one fleet, or a development machine).
    fleet: str = ""
    # The stream job's routes from episode-id prefixes to fleets (pi_format.AckRoutes.parse);
    # "" = every ack on episodes.ack.v1.
    ack_routes: str = ""
    # SASL/TLS options for every Kafka client (repr shows the keys only; values are secrets)
    kafka: KafkaSecurity = field(default_factory=KafkaSecurity)
    # Parallel sink subtasks of the stream job; 1 suits a laptop (`pilake stream --parallelism`).
    parallelism: int = 1
    # REST address of the Flink session cluster `pilake stream` submits to, e.g.
    # http://127.0.0.1:8081 ("" = the embedded mini-cluster); `pilake up --flink` starts one there.
    flink_rest_url: str = ""
    # Where the stream job's checkpoints go: a URI every Flink process reaches (s3://bucket/...
    # on a cluster); "" = <home>/flink/checkpoints, which only a one-host cluster shares.
    flink_checkpoint_dir: str = ""
    # ClickHouse server credentials ("" = pi_catalog's default user, no password).
    clickhouse_user: str = ""
    clickhouse_password: str = field(default="", repr=False)
    # S3-compatible storage of an s3:// lake ("" = the AWS SDK's own chain: env, ~/.aws, metadata).
    s3_endpoint: str = ""
    s3_region: str = ""
    s3_allow_http: bool = False  # MinIO without TLS
    s3_access_key_id: str = field(default="", repr=False)
    s3_secret_access_key: str = field(default="", repr=False)
    # Prometheus /metrics: the uploader's port, and the first port of the stream job's and the
    # loader's ranges of `metrics_port_range` ports (one per worker process on a host); 0 = off.
    # The loader serves only when asked (pi_loader reads PILAKE_LOADER_METRICS_PORT itself).
    uploader_metrics_port: int = 9461
    stream_metrics_port: int = 9470
    loader_metrics_port: int = 9480
    metrics_port_range: int = 8

    def __post_init__(self) -> None:
        if not 1 <= self.broker_port <= 65535:
            raise ValueError(f"broker_port must be in [1, 65535], got {self.broker_port}")
        if not 1 <= self.parallelism <= 64:
            raise ValueError(f"parallelism must be in [1, 64], got {self.parallelism}")
        if not 1 <= self.metrics_port_range <= 64:
            raise ValueError(f"metrics_port_range must be in [1, 64], got {self.metrics_port_range}")
        for name in ("uploader_metrics_port", "stream_metrics_port", "loader_metrics_port"):
            port = getattr(self, name)
            if not 0 <= port <= 65536 - self.metrics_port_range:
                raise ValueError(
                    f"{name} must be 0 (off) or a port whose range of {self.metrics_port_range} "
                    f"ends by 65535, got {port}"
                )
        try:  # named here, at the edge, rather than when the uploader or the job starts
            fleet_ack_topic(self.fleet)
            AckRoutes.parse(self.ack_routes)
        except ValueError as err:
            raise ValueError(f"kafka.fleet / stream.ack_routes: {err}") from err
        if not self.lake_root:
            object.__setattr__(self, "lake_root", str(self.home / "lake"))
        if not self.catalog_path:
            object.__setattr__(self, "catalog_path", str(self.home / "catalog"))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """The effective settings: defaults, then the settings file ($PILAKE_CONFIG, ./pilake.toml
        or <home>/pilake.toml), then the environment (each key's variable, see `SETTINGS_KEYS`),
        and Kafka security settings from PILAKE_KAFKA_* variables and $PILAKE_KAFKA_CONFIG or
        <home>/kafka.properties (pi_jobs.kafka_security). `resolve_settings` also says where each
        value came from."""
        return resolve_settings(environ)[0]

    @property
    def ack_topic(self) -> str:
        """The ack topic this host's uploader reads: its fleet's, or the shared one.

        Example:
            >>> Settings(home=Path("."), fleet="fleet-a").ack_topic
            'episodes.ack.v1.fleet-a'
        """
        return fleet_ack_topic(self.fleet)

    def metrics_ports(self, first: int) -> tuple[int, int] | None:
        """The (first, last) port range starting at `first` (a *_metrics_port); None when 0 (off).

        Example:
            >>> Settings.from_env().metrics_ports(9470)
            (9470, 9477)
        """
        return None if first == 0 else (first, first + self.metrics_port_range - 1)

    @property
    def run_dir(self) -> Path:
        return self.home / "run"

    @property
    def log_dir(self) -> Path:
        return self.home / "logs"

    @property
    def jar_dir(self) -> Path:
        return self.home / "jars"

    @property
    def flink_dir(self) -> Path:
        return self.home / "flink"

    @property
    def validation_dir(self) -> Path:
        """Where `pilake validate` keeps its great-expectations project and Data Docs."""
        return self.home / "validation"


def resolve_settings(
    environ: Mapping[str, str] | None = None, *, cwd: Path | None = None
) -> tuple[Settings, Resolution]:
    """The effective settings and where each value came from (`pi_jobs.config.resolve`).

    Raises:
        ConfigError: a malformed settings file or variable (the message names the key and source).

    Example:
        >>> settings, found = resolve_settings({"PILAKE_LAKE": "s3://pilake/lake"})
        >>> settings.lake_root, found.sources["lake.uri"]
        ('s3://pilake/lake', 'env PILAKE_LAKE')
    """
    env = os.environ if environ is None else environ
    home = Path(env.get(HOME_ENV, ".pilake")).absolute()
    found = resolve(SETTINGS_KEYS, env, home, cwd=cwd)
    values = dict(found.values)
    # the local broker's address unless told otherwise
    values.setdefault("bootstrap_servers", f"127.0.0.1:{values.get('broker_port', DEFAULT_BROKER_PORT)}")
    kafka = KafkaSecurity.from_sources(found.kafka_security, home)
    return Settings(home=home, kafka=kafka, **values), found
