"""What the render of deploy/prometheus/alerts_test.yaml computes from a recording beside the
input series (scripts/alert_metrics_render.py): Unix times rebased onto promtool's clock, and the
`{{ $value }}` an alert's annotation shows, computed as Prometheus does (its extrapolated
`increase`, Go's float formatting), so that no expected figure is typed by hand."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

# series holding a Unix time, and their unit (Flink's in ms): the render rebases them onto
# promtool's clock with the case's wall time per scrape
TIMESTAMPS = {
    "flink_jobmanager_job_lastCheckpointCompletedTimestamp": 1000.0,
    "pilake_verify_last_run_timestamp_seconds": 1.0,
}
LEAD_STEPS = (
    2  # promtool steps of nothing before a rebased case: a time just before its first scrape stays > 0
)


def rebase(value: float, unit: float, wall: list[float], stretch: float, step_s: float) -> float:
    """A Unix time (in `unit` per second) as promtool's time of the same moment: the first scrape
    (wall[0]) is promtool's LEAD_STEPS-th step, and wall seconds are stretched as the case's time
    axis is. A value <= 0 (Flink's -1: no checkpoint yet) is kept."""
    if value <= 0:
        return value
    return round(((value / unit - wall[0]) * stretch + LEAD_STEPS * step_s) * unit, 3)


def go_float(value: float) -> str:
    """`{{ $value }}` as Prometheus' templates print a float64 (Go's %v: shortest, no '.0')."""
    if value != 0 and (abs(value) >= 1e21 or abs(value) < 1e-4):
        raise ValueError(f"{value!r}: Go prints this with an exponent; not handled")
    text = repr(float(value))
    return text[:-2] if text.endswith(".0") else text


def extrapolated_increase(
    values: list[float | None], step_s: float, at: int, range_s: float, *, per_s: float | None = None
) -> float | None:
    """Prometheus 2's increase(series[range]) evaluated at step `at` of a series sampled every
    `step_s` (None: no sample): the samples in [t - range, t], counter resets added back, and the
    extrapolation to the range's ends (half a sample interval at most past the first and last
    samples, never below zero at the start). None with fewer than 2 samples."""
    t = at * step_s
    points = [
        (i * step_s, v) for i, v in enumerate(values[: at + 1]) if v is not None and i * step_s >= t - range_s
    ]
    if len(points) < 2:
        return None
    result = points[-1][1] - points[0][1]
    prev = points[0][1]
    for _, v in points[1:]:
        if v < prev:
            result += prev
        prev = v
    duration_to_start = points[0][0] - (t - range_s)
    duration_to_end = t - points[-1][0]
    sampled = points[-1][0] - points[0][0]
    average = sampled / (len(points) - 1)
    threshold = average * 1.1
    extrapolate = sampled
    if result > 0 and points[0][1] >= 0:
        duration_to_zero = sampled * (points[0][1] / result)
        if duration_to_zero < duration_to_start:
            duration_to_start = duration_to_zero
    extrapolate += duration_to_start if duration_to_start < threshold else average / 2
    extrapolate += duration_to_end if duration_to_end < threshold else average / 2
    factor = extrapolate / sampled
    if per_s is not None:  # rate(): Prometheus divides the factor by the range, then multiplies
        factor /= per_s
    return result * factor


def annotation_value(alert: str, case: dict[str, Any], kind: str, step_s: float, lead: int) -> str | None:
    """The `{{ $value }}` of `alert` at a case's last scrape, where its annotation shows one."""
    last = case["scrapes"][kind][-1]
    if alert == "PilakeVerifyFoundDamage":
        return f"{max(v for k, v in last.items() if k.startswith('pilake_verify_damaged_places{')):g}"
    if alert == "PilakeStreamLagGrowing":  # sum(lag) > 1000 and ...: the sum
        return go_float(
            sum(v for k, v in last.items() if k.startswith("pilake_stream_consumer_lag_messages{"))
        )
    if alert == "PilakeQuarantineRising":  # sum(increase(quarantined[1h]))
        scrapes = case["scrapes"][kind]
        keys = sorted(
            {k for sc in scrapes for k in sc if k.startswith("pilake_stream_episodes_quarantined_total{")}
        )
        at = lead + len(scrapes) - 1
        total = 0.0
        for key in keys:
            values = [None] * lead + [sc.get(key) for sc in scrapes]
            total += extrapolated_increase(values, step_s, at, 3600.0) or 0.0
        return go_float(total)
    if alert == "PilakeFreshnessSlow":  # histogram_quantile(0.95, sum by (le) (rate(...[10m])))
        return go_float(_freshness_p95(case["scrapes"][kind], step_s, lead))
    return None


def _freshness_p95(scrapes: list[dict[str, float]], step_s: float, lead: int) -> float:
    """histogram_quantile(0.95, rate(freshness buckets[10m])) at the last scrape, as Prometheus
    2.42 computes it (its extrapolated rate per bucket, then bucketQuantile)."""
    prefix = 'pilake_stream_freshness_seconds_bucket{le="'
    keys = {k for sc in scrapes for k in sc if k.startswith(prefix)}
    at = lead + len(scrapes) - 1
    buckets = []
    for key in keys:
        values = [None] * lead + [sc.get(key) for sc in scrapes]
        rate = extrapolated_increase(values, step_s, at, 600.0, per_s=600.0)
        if rate is None:
            raise ValueError(f"{key}: fewer than 2 samples in the last 10 minutes")
        buckets.append((float(key[len(prefix) : key.index('"', len(prefix))]), rate))
    buckets.sort()
    counts = [c for _, c in buckets]
    for i in range(1, len(counts)):  # Prometheus' ensureMonotonic
        counts[i] = max(counts[i], counts[i - 1])
    rank = 0.95 * counts[-1]
    b = next(i for i, c in enumerate([*counts[:-1], float("inf")]) if c >= rank)
    if b == len(buckets) - 1:
        return buckets[-2][0]
    start, end, count = 0.0, buckets[b][0], counts[b]
    if b > 0:
        start = buckets[b - 1][0]
        count -= counts[b - 1]
        rank -= counts[b - 1]
    return start + (end - start) * (rank / count)


def load_record(path: Path) -> dict[str, Any]:
    """A record of scripts/record_alert_metrics.py (gzipped JSON where the name ends in .gz)."""
    data = path.read_bytes()
    doc: dict[str, Any] = json.loads(gzip.decompress(data) if path.suffix == ".gz" else data)
    return doc


def save_record(doc: dict[str, Any], path: Path) -> None:
    """Write a record; gzip without a timestamp, so the same record gives the same bytes."""
    text = (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(text, compresslevel=9, mtime=0) if path.suffix == ".gz" else text)
