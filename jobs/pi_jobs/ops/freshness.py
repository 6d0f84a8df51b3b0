"""Freshness: how long after its last chunk was published an episode became readable.

The stream job's sink records, per committed episode, the Kafka timestamp of the latest chunk
of the attempt it committed (`published_at_ns`) and the time its Delta commit and catalog record
had both returned (`readable_at_ns`) in the catalog table `episode_freshness`
(pi_catalog). This module reads a time window of it and summarises `readable - published`:
`pilake freshness --since 1h`.

The statistics are pure functions (`percentiles`, `summarize`) so they are tested apart from
the catalog; the histogram is a matplotlib (Agg) PNG.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pi_jobs.errors import PiJobsError

_UNITS_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


class FreshnessError(PiJobsError):
    """Freshness cannot be computed or plotted (a bad window, no data to plot, an unreadable catalog)."""


@dataclass(frozen=True, slots=True)
class FreshnessSummary:
    """Freshness of the episodes that became readable in a window (seconds).

    `count`: episodes with both times; `missing_published`: readable episodes whose source gave
    no record timestamp (not in the percentiles); p50/p95/p99 by linear interpolation between
    order statistics (numpy's default), None when `count` is 0.

    Example:
        >>> summarize([0.5, 1.0, 2.0]).p50_s
        1.0
    """

    count: int
    missing_published: int = 0
    p50_s: float | None = None
    p95_s: float | None = None
    p99_s: float | None = None
    min_s: float | None = None
    max_s: float | None = None

    def format(self) -> str:
        """One line per figure, for a terminal."""

        def fmt(v: float | None) -> str:
            return "-" if v is None else f"{v:.3f} s"

        lines = [
            f"episodes  {self.count}",
            f"p50       {fmt(self.p50_s)}",
            f"p95       {fmt(self.p95_s)}",
            f"p99       {fmt(self.p99_s)}",
            f"min       {fmt(self.min_s)}",
            f"max       {fmt(self.max_s)}",
        ]
        if self.missing_published:
            lines.append(f"without a publish time (not counted): {self.missing_published}")
        return "\n".join(lines)


def parse_window(text: str) -> float:
    """A window such as "90s", "15m", "1h", "2d" (or plain seconds) in seconds.

    Raises:
        FreshnessError: not a positive number with one of the units s, m, h, d.

    Example:
        >>> parse_window("1h")
        3600.0
    """
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", text or "")
    if not match or float(match.group(1)) <= 0:
        raise FreshnessError(
            f"window must be a positive number with a unit s, m, h or d (e.g. 90s, 15m, 1h, 2d), got {text!r}"
        )
    return float(match.group(1)) * _UNITS_S[match.group(2) or "s"]


def percentiles(values: Sequence[float] | np.ndarray, qs: Sequence[float]) -> list[float]:
    """The `qs` percentiles (0-100) of `values`, linear interpolation between order statistics.

    Raises:
        FreshnessError: no values, a non-finite value, or a q outside [0, 100].

    Example:
        >>> percentiles([1.0, 2.0, 3.0, 4.0], [50, 100])
        [2.5, 4.0]
    """
    data = np.asarray(values, dtype=np.float64)
    if data.size == 0:
        raise FreshnessError("no values: percentiles of an empty window are undefined")
    if not np.all(np.isfinite(data)):
        raise FreshnessError(f"values must be finite, got {int(np.sum(~np.isfinite(data)))} that are not")
    for q in qs:
        if not 0 <= q <= 100:
            raise FreshnessError(f"percentiles must be in [0, 100], got {q}")
    return [float(v) for v in np.percentile(data, list(qs))]


def summarize(latencies_s: Sequence[float] | np.ndarray, *, missing_published: int = 0) -> FreshnessSummary:
    """Count and p50/p95/p99/min/max of `latencies_s` (empty: count 0, figures None).

    Example:
        >>> summarize([]).count
        0
    """
    data = np.asarray(latencies_s, dtype=np.float64)
    if data.size == 0:
        return FreshnessSummary(0, missing_published)
    p50, p95, p99 = percentiles(data, (50, 95, 99))
    return FreshnessSummary(
        int(data.size), missing_published, p50, p95, p99, float(data.min()), float(data.max())
    )


def histogram_bins(latencies_s: Sequence[float] | np.ndarray, *, max_bins: int = 40) -> np.ndarray:
    """Bin edges for a latency histogram: from 0 (or the minimum, if negative) to the maximum,
    `min(max_bins, ceil(sqrt(n)))` equal bins, at least one; one 1 s bin around a single value.

    Example:
        >>> histogram_bins([1.0, 2.0, 3.0, 4.0]).tolist()
        [0.0, 2.0, 4.0]
    """
    data = np.asarray(latencies_s, dtype=np.float64)
    if data.size == 0:
        raise FreshnessError("no latencies to bin")
    low, high = min(0.0, float(data.min())), float(data.max())
    if high <= low:
        return np.array([low, low + 1.0])
    n = max(1, min(max_bins, math.ceil(math.sqrt(data.size))))
    return np.linspace(low, high, n + 1)


def write_histogram(latencies_s: Sequence[float] | np.ndarray, path: Path, *, title: str) -> Path:
    """A histogram PNG of `latencies_s` with p50/p95/p99 marked; returns the path written.

    Raises:
        FreshnessError: no latencies (nothing to plot).

    Example:
        >>> write_histogram([0.8, 1.1, 1.9], Path("freshness.png"), title="last 1h")
    """
    import matplotlib

    matplotlib.use("Agg")  # no display on servers; must precede pyplot
    import matplotlib.pyplot as plt

    data = np.asarray(latencies_s, dtype=np.float64)
    summary = summarize(data)
    if summary.count == 0:
        raise FreshnessError("no episodes with both times in the window: nothing to plot")
    fig, ax = plt.subplots(figsize=(7, 4))
    try:
        ax.hist(data, bins=histogram_bins(data).tolist(), color="#4878a8")
        for label, value, style in (
            ("p50", summary.p50_s, "-"),
            ("p95", summary.p95_s, "--"),
            ("p99", summary.p99_s, ":"),
        ):
            if value is None:  # cannot happen with count > 0; keeps the types honest
                continue
            ax.axvline(value, color="#c44e52", linestyle=style, label=f"{label} {value:.2f} s")
        ax.set_xlabel("readable - last published (s)")
        ax.set_ylabel("episodes")
        ax.set_title(f"freshness, {title} ({summary.count} episodes)")
        ax.legend()
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=100, bbox_inches="tight")
    finally:
        plt.close(fig)
    return path


@dataclass(frozen=True, slots=True)
class FreshnessRows:
    """Per episode readable in the window: its times (ns) from `episode_freshness`."""

    episode_ids: tuple[str, ...]
    published_at_ns: tuple[int | None, ...]
    readable_at_ns: tuple[int, ...]

    def latencies_s(self) -> np.ndarray:
        """readable - published in seconds, for the episodes that have both."""
        pairs = zip(self.published_at_ns, self.readable_at_ns, strict=True)
        return np.array([(r - p) / 1e9 for p, r in pairs if p is not None], dtype=np.float64)

    @property
    def missing_published(self) -> int:
        return sum(1 for p in self.published_at_ns if p is None)


def read_freshness(catalog: Any, *, since_s: float, now_ns: int | None = None) -> FreshnessRows:
    """The freshness rows of episodes that became readable in the last `since_s` seconds.

    An episode recorded twice (a replayed commit) counts once, with its first readable time.

    Raises:
        pi_catalog.CatalogQueryError: the catalog cannot be read.

    Example:
        >>> rows = read_freshness(Catalog(".pilake/catalog"), since_s=3600)
    """
    now = time.time_ns() if now_ns is None else now_ns
    catalog.ensure_schema()  # a catalog made before freshness existed gains the (empty) table
    table = catalog.query_arrow(
        "SELECT episode_id, argMin(published_at_ns, readable_at_ns) AS published, "
        "min(readable_at_ns) AS readable FROM episode_freshness "
        "WHERE readable_at_ns >= {since:Int64} GROUP BY episode_id ORDER BY readable, episode_id",
        {"since": now - int(since_s * 1e9)},
    )
    ids = [v.decode() if isinstance(v, bytes) else str(v) for v in table.column("episode_id").to_pylist()]
    return FreshnessRows(
        tuple(ids),
        tuple(None if v is None else int(v) for v in table.column("published").to_pylist()),
        tuple(int(v) for v in table.column("readable").to_pylist()),
    )
