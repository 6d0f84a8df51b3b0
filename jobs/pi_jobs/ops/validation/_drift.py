"""Drift of per-episode statistics: the recent episodes of each robot type against a baseline.

Input is the episodes table (its per-episode `proprio_*` / `action_*` mean and std per dim). For
each robot type, episodes are ordered by `order_by` (start time by default); the last
`recent_episodes` are the recent window and up to `baseline_episodes` before them the baseline.

Tests, per signal and dim (why these: they are robust to a few bad baseline episodes, need no
binning, and work with windows of ~10-20 episodes, where PSI/KS on 20 points are noisy):
- stuck: an episode's std is below `stuck_ratio` x the baseline's median std (a frozen or
  all-zero sensor). Dims that are constant in the baseline too are skipped.
- scale_shift: robust z-score of log(std) against the baseline's median and MAD
  (z = (x - median) / (1.4826 MAD)). A unit change multiplies std: radians -> degrees is
  +4.05 in log std, far beyond the noise of a per-episode std.
- location_shift: robust z-score of the per-episode mean (offset, sign flip, unit change).
- dim_change: the recent episode declares another dim count than the baseline.
A z-test flags the window when at least `min_fraction` of the recent episodes exceed
`z_threshold`: one odd episode is not drift, a quarter of the window is. The MAD has a floor
(`log_std_floor`, `mean_floor_std` x the baseline's std) so a very tight baseline does not turn
rounding noise into drift.
"""

from __future__ import annotations

import html
import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

ORDER_COLUMNS = ("start_time_ns", "committed_at_ns", "received_at_ns")
KINDS = ("stuck", "scale_shift", "location_shift", "dim_change")


@dataclass(frozen=True, slots=True)
class DriftConfig:
    """Windows and thresholds of the drift check.

    Example:
        >>> DriftConfig(recent_episodes=20, baseline_episodes=200, z_threshold=6.0)
    """

    recent_episodes: int = 20
    baseline_episodes: int = 200
    order_by: str = "start_time_ns"
    signals: tuple[str, ...] = ("proprio", "action")
    # 6 robust sigmas: a clean lake of normal data essentially never exceeds it (P ~ 1e-9 per
    # value), while a x57.3 unit change lands at z of 15-20 even for 10-step episodes.
    z_threshold: float = 6.0
    min_fraction: float = 0.25
    stuck_ratio: float = 1e-3
    min_baseline: int = 8
    log_std_floor: float = 0.05  # a 5% change of a sensor's spread is never "drift"
    mean_floor_std: float = 0.05  # nor a mean shift of 5% of its typical std

    def __post_init__(self) -> None:
        for name in ("recent_episodes", "baseline_episodes", "min_baseline"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if self.order_by not in ORDER_COLUMNS:
            raise ValueError(f"order_by must be one of {ORDER_COLUMNS}, got {self.order_by!r}")
        bad = [s for s in self.signals if s not in ("proprio", "action")]
        if not self.signals or bad:
            raise ValueError(
                f"signals must be a non-empty subset of ('proprio', 'action'), got {self.signals!r}"
            )
        for name in ("z_threshold", "stuck_ratio", "log_std_floor", "mean_floor_std"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
        if not 0 < self.min_fraction <= 1:
            raise ValueError(f"min_fraction must be in (0, 1], got {self.min_fraction!r}")


@dataclass(frozen=True, slots=True)
class DriftFinding:
    """One drifted (robot type, signal, dim, kind) with the recent episodes that show it."""

    robot_type: str
    signal: str
    dim: int
    kind: str  # one of KINDS
    episodes: tuple[str, ...]  # recent episode ids that exceed the test
    fraction: float  # share of the recent window in `episodes`
    z_median: float  # median robust z over the recent window (NaN for stuck / dim_change)
    baseline_value: float  # baseline median of the tested statistic (std, mean or dim)
    recent_value: float  # median of it over the flagged recent episodes

    def describe(self) -> str:
        z = "" if math.isnan(self.z_median) else f", median z {self.z_median:+.1f}"
        return (
            f"{self.robot_type} {self.signal}[{self.dim}] {self.kind}: {len(self.episodes)} recent episodes "
            f"({self.fraction:.0%}){z}; baseline {self.baseline_value:.4g} -> recent {self.recent_value:.4g}"
        )


@dataclass(frozen=True, slots=True)
class DriftGroup:
    """The windows used for one robot type."""

    robot_type: str
    baseline_episodes: int
    recent_episodes: int
    checked: bool
    note: str = ""


@dataclass(frozen=True, slots=True)
class DriftReport:
    """Result of a drift check over one version of the episodes table."""

    version: int
    config: DriftConfig
    groups: tuple[DriftGroup, ...]
    findings: tuple[DriftFinding, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        return not self.findings

    def to_dict(self) -> dict[str, Any]:
        def clean(v: Any) -> Any:
            if isinstance(v, float) and math.isnan(v):
                return None
            if isinstance(v, dict):
                return {k: clean(x) for k, x in v.items()}
            if isinstance(v, list | tuple):
                return [clean(x) for x in v]
            return v

        out: dict[str, Any] = clean(asdict(self))
        out["ok"] = self.ok
        return out


def _robust_z(x: np.ndarray, base: np.ndarray, floor: float) -> tuple[np.ndarray, float]:
    med = float(np.median(base))
    mad = 1.4826 * float(np.median(np.abs(base - med)))
    return (x - med) / max(mad, floor), med


def _stack(cells: list[Any], dim: int) -> np.ndarray:
    return np.asarray([c for c in cells], dtype=np.float64).reshape(len(cells), dim)


def _check_signal(
    robot_type: str,
    signal: str,
    base_rows: dict[str, list[Any]],
    recent_rows: dict[str, list[Any]],
    recent_ids: list[str],
    config: DriftConfig,
) -> list[DriftFinding]:
    findings: list[DriftFinding] = []
    base_dims = [len(c) for c in base_rows[f"{signal}_mean"]]
    dim = int(np.bincount(base_dims).argmax())
    recent_dims = np.asarray([len(c) for c in recent_rows[f"{signal}_mean"]])
    changed = recent_dims != dim
    if changed.any():
        findings.append(
            DriftFinding(
                robot_type, signal, -1, "dim_change",
                tuple(i for i, c in zip(recent_ids, changed, strict=True) if c),
                float(changed.mean()), math.nan, float(dim), float(np.median(recent_dims)),
            )
        )  # fmt: skip
    keep_b = [i for i, d in enumerate(base_dims) if d == dim]
    keep_r = [i for i, c in enumerate(changed) if not c]
    if not keep_r or len(keep_b) < config.min_baseline:
        return findings
    ids = [recent_ids[i] for i in keep_r]
    n_recent = len(recent_ids)
    b_mean = _stack([base_rows[f"{signal}_mean"][i] for i in keep_b], dim)
    b_std = _stack([base_rows[f"{signal}_std"][i] for i in keep_b], dim)
    r_mean = _stack([recent_rows[f"{signal}_mean"][i] for i in keep_r], dim)
    r_std = _stack([recent_rows[f"{signal}_std"][i] for i in keep_r], dim)
    for d in range(dim):
        med_std = float(np.median(b_std[:, d]))
        if not math.isfinite(med_std) or med_std <= 1e-12:
            continue  # constant in the baseline too: nothing to compare a spread against
        stuck_r = r_std[:, d] <= config.stuck_ratio * med_std
        stuck_b = float(np.mean(b_std[:, d] <= config.stuck_ratio * med_std))
        frac = float(stuck_r.sum()) / n_recent
        if frac >= config.min_fraction and frac - stuck_b >= config.min_fraction:
            findings.append(
                DriftFinding(
                    robot_type, signal, d, "stuck",
                    tuple(i for i, s in zip(ids, stuck_r, strict=True) if s),
                    frac, math.nan, med_std, float(np.median(r_std[stuck_r, d])),
                )
            )  # fmt: skip
        live = ~stuck_r
        if not live.any():
            continue
        b_live = b_std[:, d][b_std[:, d] > config.stuck_ratio * med_std]
        z_scale, _ = _robust_z(np.log(r_std[live, d]), np.log(b_live), config.log_std_floor)
        z_loc, med_mean = _robust_z(r_mean[:, d], b_mean[:, d], config.mean_floor_std * med_std)
        live_ids = [i for i, s in zip(ids, live, strict=True) if s]
        for kind, z, z_ids, base_value, values in (
            ("scale_shift", z_scale, live_ids, med_std, r_std[live, d]),
            ("location_shift", z_loc, ids, med_mean, r_mean[:, d]),
        ):
            over = np.abs(z) > config.z_threshold
            frac = float(over.sum()) / n_recent
            if frac >= config.min_fraction:
                findings.append(
                    DriftFinding(
                        robot_type, signal, d, kind,
                        tuple(i for i, o in zip(z_ids, over, strict=True) if o),
                        frac, float(np.median(z)), base_value, float(np.median(values[over])),
                    )
                )  # fmt: skip
    return findings


def drift_check(episodes: pa.Table, config: DriftConfig | None = None, *, version: int = -1) -> DriftReport:
    """Compare the recent episodes of each robot type with the baseline before them.

    Args:
        episodes: rows of the episodes table (pi_format.EPISODES_SCHEMA).
        config: windows and thresholds.
        version: the Delta version the rows were read at (for the report).

    Example:
        >>> report = drift_check(DeltaTable("/data/lake/episodes").to_pyarrow_table())
        >>> [f.describe() for f in report.findings]
        ['arm proprio[2] scale_shift: 10 recent episodes (50%), median z +19.3; ...']
    """
    config = config or DriftConfig()
    stat_cols = [f"{s}_{w}" for s in config.signals for w in ("mean", "std")]
    needed = ["episode_id", "robot_type", config.order_by, *stat_cols]
    missing = [c for c in needed if c not in episodes.column_names]
    if missing:
        raise ValueError(f"episodes rows lack columns {missing}; pass rows of the episodes table")
    data = {c: episodes.column(c).to_pylist() for c in needed}
    by_type: dict[str, list[int]] = {}
    for i, robot_type in enumerate(data["robot_type"]):
        by_type.setdefault(str(robot_type), []).append(i)
    groups: list[DriftGroup] = []
    findings: list[DriftFinding] = []
    for robot_type in sorted(by_type):
        rows = sorted(by_type[robot_type], key=lambda i: (data[config.order_by][i], data["episode_id"][i]))
        recent = rows[-config.recent_episodes :]
        baseline = rows[: len(rows) - len(recent)][-config.baseline_episodes :]
        if len(baseline) < config.min_baseline:
            groups.append(
                DriftGroup(
                    robot_type, len(baseline), len(recent), False,
                    f"baseline has {len(baseline)} episodes, fewer than min_baseline={config.min_baseline}",
                )
            )  # fmt: skip
            continue
        groups.append(DriftGroup(robot_type, len(baseline), len(recent), True))
        base_rows = {c: [data[c][i] for i in baseline] for c in stat_cols}
        recent_rows = {c: [data[c][i] for i in recent] for c in stat_cols}
        recent_ids = [str(data["episode_id"][i]) for i in recent]
        for signal in config.signals:
            findings += _check_signal(robot_type, signal, base_rows, recent_rows, recent_ids, config)
    return DriftReport(version=version, config=config, groups=tuple(groups), findings=tuple(findings))


def check_lake_drift(
    lake_root: str, config: DriftConfig | None = None, *, version: int | None = None
) -> DriftReport:
    """`drift_check` over the lake's episodes table at `version` (latest when None).

    Example:
        >>> check_lake_drift("/data/lake", DriftConfig(recent_episodes=50)).ok
        True
    """
    from pi_format import LakeLayout

    from pi_jobs.ops.validation._runner import read_version

    config = config or DriftConfig()
    cols = ["episode_id", "robot_type", config.order_by]
    cols += [f"{s}_{w}" for s in config.signals for w in ("mean", "std")]
    rows, v = read_version(LakeLayout(lake_root).episodes, version)
    return drift_check(rows.select(cols), config, version=v)


_KIND_TEXT = {
    "stuck": "std near zero: a frozen, disconnected or all-zero sensor",
    "scale_shift": "spread changed: a unit or gain change (e.g. radians to degrees is x57.3)",
    "location_shift": "mean moved: an offset, calibration or sign change",
    "dim_change": "another number of dims than the baseline",
}


def write_drift_report(report: DriftReport, out_dir: Path) -> tuple[Path, Path]:
    """Write the report as `drift-v<version>.html` and `.json` under `out_dir`; returns both paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = out_dir / f"drift-v{report.version}"
    json_path = stem.with_suffix(".json")
    json_path.write_text(json.dumps(report.to_dict(), indent=2))
    e = html.escape
    group_rows = "".join(
        f"<tr><td>{e(g.robot_type)}</td><td>{g.baseline_episodes}</td><td>{g.recent_episodes}</td>"
        f"<td>{'yes' if g.checked else 'no'}</td><td>{e(g.note)}</td></tr>"
        for g in report.groups
    )
    finding_rows = "".join(
        f"<tr class='bad'><td>{e(f.robot_type)}</td><td>{e(f.signal)}[{f.dim}]</td>"
        f"<td title='{e(_KIND_TEXT[f.kind])}'>{e(f.kind)}</td><td>{f.fraction:.0%}</td>"
        f"<td>{'' if math.isnan(f.z_median) else f'{f.z_median:+.1f}'}</td>"
        f"<td>{f.baseline_value:.4g}</td><td>{f.recent_value:.4g}</td>"
        f"<td>{e(', '.join(f.episodes[:20]))}{' ...' if len(f.episodes) > 20 else ''}</td></tr>"
        for f in report.findings
    )
    verdict = "no drift" if report.ok else f"{len(report.findings)} drift findings"
    c = report.config
    page = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>pi-lake drift report v{report.version}</title>
<style>body{{font-family:sans-serif;margin:2em}} table{{border-collapse:collapse;margin:1em 0}}
td,th{{border:1px solid #ccc;padding:4px 8px;text-align:left}} .bad td{{background:#fde}}
.ok{{color:#070}} .fail{{color:#b00}}</style></head><body>
<h1>pi-lake drift report: episodes table v{report.version}</h1>
<p class="{"ok" if report.ok else "fail"}"><b>{e(verdict)}</b></p>
<p>Recent window: last {c.recent_episodes} episodes per robot type by {e(c.order_by)}; baseline: up to
{c.baseline_episodes} episodes before it. Robust z = (x - median) / (1.4826 MAD) of per-episode
log(std) and mean; flagged when at least {c.min_fraction:.0%} of the window has |z| &gt; {c.z_threshold}.
Stuck: std below {c.stuck_ratio} x the baseline median std.</p>
<h2>Findings</h2>
<table><tr><th>robot type</th><th>signal[dim]</th><th>kind</th><th>share</th><th>median z</th>
<th>baseline</th><th>recent</th><th>episodes</th></tr>{finding_rows}</table>
<h2>Windows</h2>
<table><tr><th>robot type</th><th>baseline</th><th>recent</th><th>checked</th><th>note</th></tr>
{group_rows}</table>
</body></html>
"""
    html_path = stem.with_suffix(".html")
    html_path.write_text(page)
    return html_path, json_path
