"""Prometheus metrics of the loader, off unless asked: `Loader(..., metrics_port=N)` or the
environment variable PILAKE_LOADER_METRICS_PORT ("9480", or a range "9480-9487" whose first
free port is taken, for several training processes on a host).

Zero cost when off: this module (and prometheus_client) is imported only when metrics are
asked for, and even then nothing runs per sample or per batch: every figure is computed when
the endpoint is scraped, from `Loader.stats()` (which already sums the workers' read counters)
and the worker pool's prefetch counts.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from pi_loader._errors import PiLoaderError

__all__ = ["METRICS_PORT_ENV", "METRIC_NAMES", "REGISTRY", "serve_loader_metrics", "served_port"]

METRICS_PORT_ENV = "PILAKE_LOADER_METRICS_PORT"

# Every series name this module exports (counters with _total), for the dashboard test and
# `pilake status`.
METRIC_NAMES = (
    "pilake_loader_samples_total",
    "pilake_loader_batches_total",
    "pilake_loader_wait_seconds_total",
    "pilake_loader_bytes_read_total",
    "pilake_loader_video_reads_total",
    "pilake_loader_steps_reads_total",
    "pilake_loader_samples_per_second",
    "pilake_loader_prefetch_ready_batches",
    "pilake_loader_prefetch_in_flight_batches",
    "pilake_loader_cache_hit_ratio",
    "pilake_loader_corrupt_skipped_total",
    "pilake_loader_storage_retries_total",
    "pilake_loader_storage_giveups_total",
)


def _hit_ratio(misses: int, lookups: int) -> float:
    return min(1.0, max(0.0, 1.0 - misses / lookups)) if lookups > 0 else 0.0


class _LoaderCollector(Collector):
    """Figures of the live loaders of this process (summed when there are several)."""

    def __init__(self) -> None:
        self._loaders: weakref.WeakSet[Any] = weakref.WeakSet()
        self._lock = threading.Lock()
        self._last: tuple[float, int] | None = None  # (monotonic time, samples) at the last scrape
        self._started = time.monotonic()

    def add(self, loader: Any) -> None:
        with self._lock:
            self._loaders.add(loader)

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        samples = batches = bytes_read = video_reads = steps_reads = steps_lookups = frame_lookups = 0
        corrupt = retries = giveups = 0
        ready = in_flight = 0
        wait_s = 0.0
        with self._lock:
            loaders = list(self._loaders)
        for loader in loaders:
            stats = loader.stats()
            samples += stats.samples
            batches += stats.batches
            bytes_read += stats.bytes_read
            video_reads += stats.video_reads
            steps_reads += stats.steps_reads
            steps_lookups += stats.steps_lookups
            corrupt += stats.corrupt_skipped
            retries += stats.storage_retries
            giveups += stats.storage_giveups
            wait_s += stats.wait_seconds
            spec = loader.dataset.spec
            frame_lookups += stats.samples * len(loader.dataset.cameras) * (spec.frame_history + 1)
            ready += loader._worker_pool.ready_batches
            in_flight += loader._worker_pool.in_flight_batches
        yield CounterMetricFamily("pilake_loader_samples", "Samples handed out.", value=samples)
        yield CounterMetricFamily("pilake_loader_batches", "Batches handed out.", value=batches)
        yield CounterMetricFamily(
            "pilake_loader_wait_seconds",
            "Seconds the consumer spent blocked waiting for its next batch (the wait in progress "
            "included): rate(pilake_loader_wait_seconds_total[5m]) is the fraction of the time the "
            "trainer was starved of data.",
            value=wait_s,
        )
        yield CounterMetricFamily(
            "pilake_loader_corrupt_skipped",
            "Samples skipped because their stored bytes failed a checksum (on_corrupt='skip').",
            value=corrupt,
        )
        yield CounterMetricFamily(
            "pilake_loader_storage_retries",
            "Object-store reads tried again after a transient error (refused, reset, 5xx, timeout).",
            value=retries,
        )
        yield CounterMetricFamily(
            "pilake_loader_storage_giveups",
            "Object-store reads that still failed at the retry deadline (RetryConfig.deadline_s).",
            value=giveups,
        )
        yield CounterMetricFamily(
            "pilake_loader_bytes_read",
            "Bytes read from lake files (footers plus column chunks), all worker processes.",
            value=bytes_read,
        )
        yield CounterMetricFamily(
            "pilake_loader_video_reads", "Video chunks read (chunk-cache misses).", value=video_reads
        )
        yield CounterMetricFamily(
            "pilake_loader_steps_reads", "Steps row groups read (steps-cache misses).", value=steps_reads
        )
        now = time.monotonic()
        with self._lock:
            last_t, last_samples = self._last or (self._started, 0)
            self._last = (now, samples)
        rate = (samples - last_samples) / (now - last_t) if now > last_t and samples >= last_samples else 0.0
        yield GaugeMetricFamily(
            "pilake_loader_samples_per_second",
            "Samples handed out per second since the previous scrape (PromQL: prefer "
            "rate(pilake_loader_samples_total[1m]), which does not depend on who scraped last).",
            value=rate,
        )
        yield GaugeMetricFamily(
            "pilake_loader_prefetch_ready_batches",
            "Batches built by the workers and waiting to be handed out (0 often: input-bound).",
            value=ready,
        )
        yield GaugeMetricFamily(
            "pilake_loader_prefetch_in_flight_batches",
            "Batches requested from the workers and not yet handed out (at most prefetch_batches).",
            value=in_flight,
        )
        ratio = GaugeMetricFamily(
            "pilake_loader_cache_hit_ratio",
            "1 - reads / lookups, by cache: 'steps' (the steps row groups a sample's window covers), "
            "'video_chunks' (one lookup per sample, camera and frame of history).",
            labels=["cache"],
        )
        ratio.add_metric(["steps"], _hit_ratio(steps_reads, steps_lookups))
        ratio.add_metric(["video_chunks"], _hit_ratio(video_reads, frame_lookups))
        yield ratio


REGISTRY = CollectorRegistry()
_LOADERS = _LoaderCollector()
REGISTRY.register(_LOADERS)

_served: dict[str, int] = {}
_served_lock = threading.Lock()


def _parse_ports(text: str) -> tuple[int, int]:
    first, sep, last = text.strip().partition("-")
    try:
        lo = int(first)
        hi = int(last) if sep else lo
    except ValueError:
        lo = hi = -1
    if not 1 <= lo <= hi <= 65535:
        raise PiLoaderError(
            f"{METRICS_PORT_ENV} must be a port or a range 'first-last' within 1-65535, got {text!r}"
        )
    return lo, hi


def serve_loader_metrics(loader: Any, port: int | str) -> int:
    """Include `loader` in this process's loader metrics and serve them (once per process) on
    `port`: an int, or a text port or 'first-last' range (first free port taken).

    Raises:
        PiLoaderError: no port of the range is free, or it is malformed.

    Example:
        >>> serve_loader_metrics(loader, "9480-9487")
        9480
    """
    lo, hi = (port, port) if isinstance(port, int) else _parse_ports(port)
    if not 1 <= lo <= hi <= 65535:
        raise PiLoaderError(f"metrics_port must be in [1, 65535], got {port!r}")
    _LOADERS.add(loader)
    with _served_lock:
        if "port" in _served:  # one endpoint per process, every loader of it included
            return _served["port"]
        for candidate in range(lo, hi + 1):
            try:
                start_http_server(candidate, registry=REGISTRY)
            except OSError:
                continue
            _served["port"] = candidate
            return candidate
    raise PiLoaderError(
        f"cannot serve loader metrics: every port of {lo}-{hi} is taken; pass another metrics_port "
        f"or set {METRICS_PORT_ENV} to a free range"
    )


def served_port() -> int | None:
    """The port this process serves loader metrics on, or None."""
    with _served_lock:
        return _served.get("port")
