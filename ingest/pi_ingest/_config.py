"""The uploader's options: where it sends, how long it waits, and what it never lets callers set.

Read by every part of the uploader (the producer, the ack listener and the upload loop in
`pi_ingest.uploader`, which re-exports `UploaderConfig`); imports nothing else of pi_ingest.
"""

from __future__ import annotations

import math
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pi_format.episode import check_name
from pi_format.topics import ACK_TOPIC, RAW_TOPIC

# Options the uploader sets itself: letting callers override them would break its guarantees
# (idempotence, acks=all) or its bookkeeping (callbacks).
_RESERVED_OPTIONS = frozenset(
    {"bootstrap.servers", "enable.idempotence", "acks", "error_cb", "on_delivery", "logger", "group.id"}
)


@dataclass(frozen=True, slots=True)
class UploaderConfig:
    """Where and how the uploader sends.

    Args:
        bootstrap_servers: Kafka bootstrap servers, e.g. "127.0.0.1:19092".
        spool_dir: the durable spool directory (created if missing).
        raw_topic: topic for wire chunks.
        ack_topic: topic of the lake's acknowledgements.
        resend_after_s: an episode sent but not acknowledged within this time is sent again.
            120 s: the stream job acks after its Delta commit, normally within seconds to a
            minute (checkpoint interval plus featurization); waiting two minutes keeps
            re-sends rare (they are harmless, the lake de-duplicates, but cost bandwidth)
            while an episode lost in transit (e.g. a broker restart wiped it) is re-sent soon.
        delivery_timeout_s: how long librdkafka retries one message before reporting failure.
        backoff_initial_s: first pause before retrying failed messages; doubles each round.
        backoff_max_s: longest pause between retry rounds.
        send_rounds: attempts per episode within one `send_pending` call before it is left
            pending for the next call (3: the first try, a retry, a retry with a new producer).
        close_timeout_s: how long ending a Kafka client (a producer discarded after failed
            deliveries, the ack consumer on close) may take before the uploader leaves it to a
            background thread and goes on (`pi_ingest._bounded`). 10 s: a healthy client ends
            in milliseconds and a starved one may never end (librdkafka#4519); ten seconds
            outlasts a loaded machine's hiccup yet keeps `close()` short enough for a robot's
            shutdown grace period.
        client_options: extra librdkafka settings for the producer and the consumer, as-is
            (security.protocol, sasl.*, ssl.*). Values never appear in repr or logs.
        metrics_port: serve Prometheus metrics (pi_ingest._metrics) on this port; None or 0: off.

    Example:
        >>> cfg = UploaderConfig("127.0.0.1:19092", Path("spool"),
        ...                      client_options={"security.protocol": "SASL_SSL"})
    """

    bootstrap_servers: str
    spool_dir: Path
    raw_topic: str = RAW_TOPIC
    ack_topic: str = ACK_TOPIC
    resend_after_s: float = 120.0
    delivery_timeout_s: float = 30.0
    backoff_initial_s: float = 0.5
    backoff_max_s: float = 30.0
    send_rounds: int = 3
    close_timeout_s: float = 10.0
    client_options: Mapping[str, str] = field(default_factory=dict)
    metrics_port: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.bootstrap_servers, str) or not self.bootstrap_servers.strip():
            raise ValueError(
                f"bootstrap_servers must be a non-empty 'host:port[,host:port]' string, "
                f"got {self.bootstrap_servers!r}"
            )
        if isinstance(self.spool_dir, str):
            object.__setattr__(self, "spool_dir", Path(self.spool_dir))
        if not isinstance(self.spool_dir, Path):
            raise TypeError(f"spool_dir must be a Path, got {type(self.spool_dir).__name__}")
        check_name("raw_topic", self.raw_topic)
        check_name("ack_topic", self.ack_topic)
        if self.raw_topic == self.ack_topic:
            raise ValueError(f"raw_topic and ack_topic must differ, both are {self.raw_topic!r}")
        for name, low, inclusive in (
            ("resend_after_s", 0.0, True),
            ("delivery_timeout_s", 0.0, False),
            ("backoff_initial_s", 0.0, False),
            ("backoff_max_s", 0.0, False),
            ("close_timeout_s", 0.0, False),
        ):
            value = getattr(self, name)
            ok = isinstance(value, int | float) and math.isfinite(value)
            ok = ok and (value >= low if inclusive else value > low)
            if not ok:
                rule = ">= 0" if inclusive else "> 0"
                raise ValueError(f"{name} must be a finite number {rule}, got {value!r}")
        if self.backoff_max_s < self.backoff_initial_s:
            raise ValueError(
                f"backoff_max_s must be >= backoff_initial_s ({self.backoff_initial_s}), "
                f"got {self.backoff_max_s}"
            )
        if (
            isinstance(self.send_rounds, bool)
            or not isinstance(self.send_rounds, int)
            or self.send_rounds < 1
        ):
            raise ValueError(f"send_rounds must be an integer >= 1, got {self.send_rounds!r}")
        if not isinstance(self.client_options, Mapping):
            raise TypeError(
                f"client_options must be a mapping of str to str, got {type(self.client_options).__name__}"
            )
        for key, value in self.client_options.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise TypeError(
                    f"client_options must map str to str; key {key!r} has a {type(value).__name__} value"
                )
            if key in _RESERVED_OPTIONS:
                raise ValueError(
                    f"client_options must not set {key!r}: the uploader sets it (use the config "
                    f"field instead, or leave it to the uploader); reserved: {sorted(_RESERVED_OPTIONS)}"
                )
        object.__setattr__(self, "client_options", types.MappingProxyType(dict(self.client_options)))
        port = self.metrics_port
        if type(port) is int and port == 0:  # 0 = off, as for every pi-lake metrics port
            object.__setattr__(self, "metrics_port", None)
            port = None
        bad_port = isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535
        if port is not None and bad_port:
            raise ValueError(f"metrics_port must be None or 0 (off) or an int in [1, 65535], got {port!r}")

    def __repr__(self) -> str:
        # Never show client option values: they hold passwords and key material.
        hidden = {k: "***" for k in sorted(self.client_options)}
        return (
            f"UploaderConfig(bootstrap_servers={self.bootstrap_servers!r}, spool_dir={self.spool_dir!r}, "
            f"raw_topic={self.raw_topic!r}, ack_topic={self.ack_topic!r}, "
            f"resend_after_s={self.resend_after_s!r}, delivery_timeout_s={self.delivery_timeout_s!r}, "
            f"backoff_initial_s={self.backoff_initial_s!r}, backoff_max_s={self.backoff_max_s!r}, "
            f"send_rounds={self.send_rounds!r}, close_timeout_s={self.close_timeout_s!r}, "
            f"client_options={hidden!r}, "
            f"metrics_port={self.metrics_port!r})"
        )

    __str__ = __repr__
