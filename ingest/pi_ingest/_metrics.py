"""Prometheus metrics of the uploader: what it spooled, sent, re-sent and had acknowledged.

The counters live in this package's own registry (`REGISTRY`), so a process that also runs a
loader or a stream job never mixes their series. Counting always happens (a few integer
increments per episode); serving `/metrics` happens only when `UploaderConfig.metrics_port` is
set, once per process (`serve_metrics`). The spool's size and the age of its oldest episode are
measured when scraped, from the bundle files on disk, so the upload loop never pays for it.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from pi_ingest.errors import PiIngestError

__all__ = [
    "ACKED",
    "BYTES_SENT",
    "CHUNKS_SENT",
    "EPISODES_RESENT",
    "EPISODES_SENT",
    "EPISODES_SPOOLED",
    "KAFKA_STALLS",
    "METRIC_NAMES",
    "REGISTRY",
    "SEND_FAILURES",
    "serve_metrics",
    "served_port",
    "watch_spool",
]

REGISTRY = CollectorRegistry()

EPISODES_SPOOLED = Counter(
    "pilake_uploader_episodes_spooled", "Episodes newly written to a spool.", registry=REGISTRY
)
CHUNKS_SENT = Counter(
    "pilake_uploader_chunks_sent", "Wire chunks (Kafka messages) the broker confirmed.", registry=REGISTRY
)
BYTES_SENT = Counter(
    "pilake_uploader_bytes_sent", "Bytes of wire chunks the broker confirmed.", registry=REGISTRY
)
EPISODES_SENT = Counter(
    "pilake_uploader_episodes_sent",
    "Episodes whose every chunk the broker confirmed (re-sends included).",
    registry=REGISTRY,
)
EPISODES_RESENT = Counter(
    "pilake_uploader_episodes_resent",
    "Episodes sent again because no lake ack came within resend_after_s.",
    registry=REGISTRY,
)
ACKED = Counter(
    "pilake_uploader_episodes_acked",
    "Spooled episodes confirmed by a lake ack, by ack status (committed, quarantined).",
    ["status"],
    registry=REGISTRY,
)
SEND_FAILURES = Counter(
    "pilake_uploader_send_failures",
    "Episode sends that ended without the broker confirming every chunk (broker down, starved "
    "or refusing); the episode stays spooled and is sent again.",
    registry=REGISTRY,
)
KAFKA_STALLS = Counter(
    "pilake_uploader_kafka_stalls",
    "Kafka client teardowns (producer_destroy, consumer_close) that did not return within "
    "close_timeout_s and were left to a background thread; the uploader went on.",
    ["call"],
    registry=REGISTRY,
)
for _call in ("producer_destroy", "consumer_close"):  # a 0 series from the start, for alerts
    KAFKA_STALLS.labels(_call)
# A 0 series from the start: an uploader that never got an ack must still have the series that
# PilakeUploaderNotAcknowledged's rate() reads (without it the alert cannot fire).
for _status in ("committed", "quarantined"):
    ACKED.labels(_status)

# Every series name this module exports (counters with their _total suffix), for the
# dashboard test and `pilake status`.
METRIC_NAMES = (
    "pilake_uploader_episodes_spooled_total",
    "pilake_uploader_chunks_sent_total",
    "pilake_uploader_bytes_sent_total",
    "pilake_uploader_episodes_sent_total",
    "pilake_uploader_episodes_resent_total",
    "pilake_uploader_episodes_acked_total",
    "pilake_uploader_send_failures_total",
    "pilake_uploader_kafka_stalls_total",
    "pilake_uploader_spool_bytes",
    "pilake_uploader_spool_episodes",
    "pilake_uploader_oldest_spooled_seconds",
)


class _SpoolCollector(Collector):
    """Bytes and episodes of the spools of live uploaders, read from disk at scrape time."""

    def __init__(self) -> None:
        self._spools: weakref.WeakSet[Any] = weakref.WeakSet()

    def add(self, spool: Any) -> None:
        self._spools.add(spool)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        from pi_format.wire import BUNDLE_SUFFIX

        size = count = 0
        oldest: float | None = None
        for root in {Path(s.root).absolute() for s in list(self._spools)}:
            for bundle in root.glob(f"*{BUNDLE_SUFFIX}"):
                try:
                    st = bundle.stat()
                except FileNotFoundError:  # confirmed while we looked
                    continue
                size += st.st_size
                count += 1
                # a bundle is written once, when its episode is spooled (Spool.add)
                oldest = st.st_mtime if oldest is None else min(oldest, st.st_mtime)
        yield GaugeMetricFamily(
            "pilake_uploader_spool_bytes", "Bytes of episode bundles waiting in the spool.", value=size
        )
        yield GaugeMetricFamily(
            "pilake_uploader_spool_episodes", "Episodes waiting in the spool for a lake ack.", value=count
        )
        yield GaugeMetricFamily(
            "pilake_uploader_oldest_spooled_seconds",
            "Age of the oldest episode waiting in the spool for a lake ack (now minus the time its "
            "bundle was written); 0 when the spool is empty.",
            value=0.0 if oldest is None else max(0.0, time.time() - oldest),
        )


_SPOOLS = _SpoolCollector()
REGISTRY.register(_SPOOLS)


def watch_spool(spool: Any) -> None:
    """Include `spool` (a `pi_ingest.Spool`) in the spool gauges while it is alive."""
    _SPOOLS.add(spool)


_serving: dict[str, int] = {}
_serving_lock = threading.Lock()


def serve_metrics(port: int, addr: str = "0.0.0.0") -> int:
    """Serve this process's uploader metrics on http://addr:port/metrics (once per process).

    A second call with the same port is a no-op; with another port it raises, since one process
    has one uploader endpoint.

    Raises:
        PiIngestError: the port is taken, out of range, or another port is already served.

    Example:
        >>> serve_metrics(9461)
        9461
    """
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise PiIngestError(f"metrics_port must be an int in [1, 65535], got {port!r}")
    with _serving_lock:
        served = _serving.get("port")
        if served == port:
            return port
        if served is not None:
            raise PiIngestError(
                f"uploader metrics are already served on port {served} by this process; cannot also "
                f"serve them on {port}: use the same metrics_port for every uploader of a process"
            )
        try:
            start_http_server(port, addr=addr, registry=REGISTRY)
        except OSError as err:
            raise PiIngestError(
                f"cannot serve uploader metrics on {addr}:{port}: {err}; choose a free port "
                "(UploaderConfig.metrics_port, PILAKE_UPLOADER_METRICS_PORT)"
            ) from err
        _serving["port"] = port
        return port


def served_port() -> int | None:
    """The port this process serves uploader metrics on, or None."""
    with _serving_lock:
        return _serving.get("port")
