"""The live metrics of the local stack, for `pilake status`: scrape the known /metrics endpoints
(the uploader's port, the stream job's and the loader's port ranges in `Settings`) and say in a
few lines what each running process reports.

A port that does not answer is simply not running (connection refused costs nothing on
loopback); a port that answers with something other than Prometheus text is reported as such.
"""

from __future__ import annotations

import math
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from pi_jobs.settings import Settings

__all__ = ["Scrape", "local_endpoints", "metrics_lines", "render", "scrape", "scrape_local"]

# (component, first port, last port)
Endpoint = tuple[str, int, int]
Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class Scrape:
    """One endpoint's samples: metric sample name -> {sorted label pairs: value}.

    Example:
        >>> s = scrape("http://127.0.0.1:9470/metrics", "stream")
        >>> s.total("pilake_stream_episodes_committed_total")
        12.0
    """

    component: str
    url: str
    samples: Mapping[str, Mapping[Labels, float]] = field(default_factory=dict)
    error: str = ""

    def total(self, name: str, **labels: str) -> float:
        """Sum of the samples of `name` whose labels include `labels` (0 when absent)."""
        wanted = set(labels.items())
        return sum(v for k, v in self.samples.get(name, {}).items() if wanted <= set(k))

    def by_label(self, name: str, label: str) -> dict[str, float]:
        """Samples of `name` by the value of one label."""
        out: dict[str, float] = {}
        for key, value in self.samples.get(name, {}).items():
            text = dict(key).get(label)
            if text is not None:
                out[text] = out.get(text, 0.0) + value
        return out

    def quantile(self, histogram: str, q: float) -> float | None:
        """The q-quantile of a histogram, interpolated in its buckets as PromQL's
        histogram_quantile does; None without observations."""
        buckets = sorted(
            (math.inf if le == "+Inf" else float(le), count)
            for le, count in self.by_label(f"{histogram}_bucket", "le").items()
        )
        if not buckets or buckets[-1][1] <= 0:
            return None
        rank = q * buckets[-1][1]
        lower, below = 0.0, 0.0
        for upper, count in buckets:
            if count >= rank:
                if math.isinf(upper):
                    return lower  # above the last finite bucket: its bound is all we know
                share = (rank - below) / (count - below) if count > below else 1.0
                return lower + (upper - lower) * share
            lower, below = upper, count
        return lower


def local_endpoints(settings: Settings) -> list[Endpoint]:
    """The ports `pilake status` scrapes on 127.0.0.1, by component (0 ports: off).

    Example:
        >>> local_endpoints(Settings.from_env())
        [('uploader', 9461, 9461), ('stream', 9470, 9477), ('loader', 9480, 9487)]
    """
    out: list[Endpoint] = []
    if settings.uploader_metrics_port:
        out.append(("uploader", settings.uploader_metrics_port, settings.uploader_metrics_port))
    for component, first in (
        ("stream", settings.stream_metrics_port),
        ("loader", settings.loader_metrics_port),
    ):
        ports = settings.metrics_ports(first)
        if ports is not None:
            out.append((component, *ports))
    return out


def scrape(url: str, component: str, timeout_s: float = 2.0) -> Scrape | None:
    """Read one endpoint; None when nothing listens there.

    Example:
        >>> scrape("http://127.0.0.1:9461/metrics", "uploader").total("pilake_uploader_episodes_sent_total")
        4.0
    """
    from prometheus_client.parser import text_string_to_metric_families

    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            text = response.read().decode("utf-8", "replace")
    except (ConnectionRefusedError, ConnectionResetError):
        return None
    except urllib.error.URLError as err:
        if isinstance(err.reason, ConnectionRefusedError | ConnectionResetError):
            return None
        return Scrape(component, url, error=f"unreadable: {err.reason}")
    except (OSError, ValueError) as err:
        return Scrape(component, url, error=f"unreadable: {err}")
    samples: dict[str, dict[Labels, float]] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                key = tuple(sorted(sample.labels.items()))
                samples.setdefault(sample.name, {})[key] = float(sample.value)
    except ValueError as err:
        return Scrape(component, url, error=f"not Prometheus text: {err}")
    return Scrape(component, url, samples)


def scrape_local(settings: Settings, host: str = "127.0.0.1") -> list[Scrape]:
    """Every endpoint of the local stack that answers."""
    found = []
    for component, first, last in local_endpoints(settings):
        for port in range(first, last + 1):
            result = scrape(f"http://{host}:{port}/metrics", component)
            if result is not None:
                found.append(result)
    return found


def _mb(value: float) -> str:
    return f"{value / 1e6:.1f} MB"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def _counts(values: Mapping[str, float]) -> str:
    return ", ".join(f"{k} {v:.0f}" for k, v in sorted(values.items())) or "none"


def _uploader_lines(s: Scrape) -> list[str]:
    acked = s.by_label("pilake_uploader_episodes_acked_total", "status")
    return [
        f"spooled {s.total('pilake_uploader_episodes_spooled_total'):.0f} episodes, "
        f"sent {s.total('pilake_uploader_episodes_sent_total'):.0f} "
        f"({s.total('pilake_uploader_chunks_sent_total'):.0f} chunks, "
        f"{_mb(s.total('pilake_uploader_bytes_sent_total'))}), "
        f"re-sent {s.total('pilake_uploader_episodes_resent_total'):.0f}",
        f"acked: {_counts(acked)}; spool now {s.total('pilake_uploader_spool_episodes'):.0f} episodes, "
        f"{_mb(s.total('pilake_uploader_spool_bytes'))}",
    ]


def _stream_lines(s: Scrape) -> list[str]:
    quarantined = s.by_label("pilake_stream_episodes_quarantined_total", "reason")
    lag = s.by_label("pilake_stream_consumer_lag_messages", "partition")
    commits = s.total("pilake_stream_commit_seconds_count")
    return [
        f"subtask {s.total('pilake_stream_subtask'):.0f}: "
        f"{s.total('pilake_stream_messages_total'):.0f} messages "
        f"({_mb(s.total('pilake_stream_bytes_in_total'))}), "
        f"{s.total('pilake_stream_episodes_in_total'):.0f} episodes in, "
        f"{s.total('pilake_stream_episodes_committed_total'):.0f} committed, "
        f"{s.total('pilake_stream_episodes_duplicate_total'):.0f} duplicate, "
        f"{_mb(s.total('pilake_stream_bytes_written_total'))} written",
        f"quarantined: {_counts(quarantined)}; consumer lag by partition: {_counts(lag)}",
        f"{commits:.0f} commits, latency p50 {_seconds(s.quantile('pilake_stream_commit_seconds', 0.5))} "
        f"p95 {_seconds(s.quantile('pilake_stream_commit_seconds', 0.95))}; freshness p50 "
        f"{_seconds(s.quantile('pilake_stream_freshness_seconds', 0.5))} "
        f"p95 {_seconds(s.quantile('pilake_stream_freshness_seconds', 0.95))}",
    ]


def _loader_lines(s: Scrape) -> list[str]:
    hits = s.by_label("pilake_loader_cache_hit_ratio", "cache")
    return [
        f"{s.total('pilake_loader_samples_total'):.0f} samples "
        f"({s.total('pilake_loader_samples_per_second'):.1f}/s since the last scrape), "
        f"{_mb(s.total('pilake_loader_bytes_read_total'))} read, "
        f"consumer waited {s.total('pilake_loader_wait_seconds_total'):.1f} s for batches",
        f"prefetch: {s.total('pilake_loader_prefetch_ready_batches'):.0f} ready, "
        f"{s.total('pilake_loader_prefetch_in_flight_batches'):.0f} in flight; cache hit ratio: "
        + (", ".join(f"{k} {v:.0%}" for k, v in sorted(hits.items())) or "none"),
    ]


_LINES = {"uploader": _uploader_lines, "stream": _stream_lines, "loader": _loader_lines}


def render(scrapes: Iterable[Scrape]) -> list[str]:
    """Lines for `pilake status`, one block per endpoint."""
    lines = []
    for s in scrapes:
        lines.append(f"{s.component} {s.url}")
        if s.error:
            lines.append(f"  {s.error}")
            continue
        lines.extend(f"  {line}" for line in _LINES[s.component](s))
    return lines


def metrics_lines(settings: Settings) -> list[str]:
    """The metrics section of `pilake status` for the local stack.

    Example:
        >>> print("\\n".join(metrics_lines(Settings.from_env())))
        metrics: nothing serves on uploader 9461, stream 9470-9477, loader 9480-9487
    """
    scrapes = scrape_local(settings)
    if scrapes:
        return render(scrapes)
    ports = ", ".join(f"{c} {a}" if a == b else f"{c} {a}-{b}" for c, a, b in local_endpoints(settings))
    return [f"metrics: nothing serves on {ports or 'no port (all metrics ports are 0)'}"]
