"""Where a pi-lake installation keeps its state, read once from the environment at the edge.

Defaults make the embedded stack work with no configuration: a state dir `./.pilake` holding
the broker's pid and log, the lake, the catalog and the connector jars.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from pi_jobs.kafka_security import KafkaSecurity

# 19092 rather than Kafka's 9092, so a developer's real Kafka on 9092 is left alone.
DEFAULT_BROKER_PORT = 19092


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
    # SASL/TLS options for every Kafka client (repr shows the keys only; values are secrets)
    kafka: KafkaSecurity = field(default_factory=KafkaSecurity)

    def __post_init__(self) -> None:
        if not 1 <= self.broker_port <= 65535:
            raise ValueError(f"broker_port must be in [1, 65535], got {self.broker_port}")
        if not self.lake_root:
            object.__setattr__(self, "lake_root", str(self.home / "lake"))
        if not self.catalog_path:
            object.__setattr__(self, "catalog_path", str(self.home / "catalog"))

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> Settings:
        """Read PILAKE_HOME, PILAKE_BROKER_PORT, PILAKE_BOOTSTRAP, PILAKE_LAKE, PILAKE_CATALOG,
        PILAKE_ROBOTS (the robot registry file), and Kafka security settings from PILAKE_KAFKA_*
        variables and $PILAKE_KAFKA_CONFIG or <home>/kafka.properties (pi_jobs.kafka_security)."""
        env = os.environ if environ is None else environ
        home = Path(env.get("PILAKE_HOME", ".pilake")).absolute()
        port_text = env.get("PILAKE_BROKER_PORT", str(DEFAULT_BROKER_PORT))
        try:
            port = int(port_text)
        except ValueError as err:
            raise ValueError(f"PILAKE_BROKER_PORT must be an integer, got {port_text!r}") from err
        return cls(
            home=home,
            broker_port=port,
            bootstrap_servers=env.get("PILAKE_BOOTSTRAP", f"127.0.0.1:{port}"),
            lake_root=env.get("PILAKE_LAKE", ""),
            catalog_path=env.get("PILAKE_CATALOG", ""),
            robots_path=env.get("PILAKE_ROBOTS", ""),
            kafka=KafkaSecurity.from_sources(env, home),
        )

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
