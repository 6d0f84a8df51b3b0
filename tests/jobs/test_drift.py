"""Drift of per-episode statistics, on real Delta episodes tables written from factory episodes."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from deltalake import write_deltalake
from pi_format import EPISODES_SCHEMA
from pi_jobs.cli import main
from pi_jobs.ops.validation import DriftConfig, check_lake_drift, drift_check, write_drift_report

from tests.fixtures import lake_factory as lf

Mutation = Callable[[np.ndarray], np.ndarray]


def _episodes(
    count: int,
    *,
    steps: int = 12,
    seed: int = 0,
    mutate: Mutation | None = None,
    last: int = 10,
    robot_type: str = "arm",
) -> pa.Table:
    """Episodes rows whose statistics come from real per-step arrays (the factory's _stats);
    the last `last` episodes have their proprio passed through `mutate` first."""
    fakes = []
    for i in range(count):
        rng = np.random.default_rng([seed, i])
        # per-dim offsets and spreads, like joints with different ranges
        proprio = (rng.normal(size=(steps, 3)) * [0.5, 1.0, 2.0] + [0.0, 1.5, -3.0]).astype(np.float32)
        if mutate is not None and i >= count - last:
            proprio = mutate(proprio).astype(np.float32)
        action = rng.normal(size=(steps, 2)).astype(np.float32)
        fakes.append(
            lf.FakeEpisode(
                f"{robot_type}-{i:03d}", f"a-{i}", "r0", "pick", True, ("c",),
                proprio, action, np.zeros((steps, 1), np.int32),
            )
        )  # fmt: skip
    rows = lf.episode_rows(fakes)
    rows = rows.set_column(
        rows.schema.get_field_index("robot_type"), "robot_type", pa.array([robot_type] * count)
    )
    return rows.cast(EPISODES_SCHEMA)


def _kinds(report) -> set[tuple[str, str, int, str]]:
    return {(f.robot_type, f.signal, f.dim, f.kind) for f in report.findings}


@pytest.mark.parametrize("seed", range(12))
def test_clean_episodes_never_flagged(seed):
    for steps in (8, 50):
        report = drift_check(_episodes(60, steps=steps, seed=seed))
        assert report.ok, [f.describe() for f in report.findings]
        assert report.groups[0].checked and report.groups[0].recent_episodes == 20


@pytest.mark.parametrize("seed", range(5))
def test_degrees_instead_of_radians_is_a_scale_shift(seed):
    report = drift_check(_episodes(60, seed=seed, mutate=lambda p: p * 57.2958, last=10))
    kinds = _kinds(report)
    for dim in range(3):
        assert ("arm", "proprio", dim, "scale_shift") in kinds
    assert not any(f.signal == "action" for f in report.findings)
    scale = [f for f in report.findings if f.kind == "scale_shift"]
    assert all(len(f.episodes) >= 9 and all(e >= "arm-050" for e in f.episodes) for f in scale)
    assert all(f.recent_value / f.baseline_value > 20 for f in scale)


@pytest.mark.parametrize(
    "mutate",
    [
        pytest.param(lambda p: np.repeat(p[:1], len(p), axis=0), id="frozen"),
        pytest.param(lambda p: np.zeros_like(p), id="all-zeros"),
    ],
)
def test_broken_sensor_is_stuck(mutate):
    def one_dim(p: np.ndarray) -> np.ndarray:
        p = p.copy()
        p[:, 1] = mutate(p)[:, 1]
        return p

    report = drift_check(_episodes(60, seed=4, mutate=one_dim, last=6))
    assert ("arm", "proprio", 1, "stuck") in _kinds(report)
    stuck = next(f for f in report.findings if f.kind == "stuck")
    assert stuck.episodes == tuple(f"arm-{i:03d}" for i in range(54, 60))
    assert not any(f.dim in (0, 2) and f.signal == "proprio" for f in report.findings)


def test_offset_is_a_location_shift_and_groups_are_per_robot_type():
    shifted = _episodes(40, seed=2, mutate=lambda p: p + np.array([0.0, 0.0, 5.0]), last=10, robot_type="arm")
    clean = _episodes(40, seed=2, robot_type="humanoid")
    report = drift_check(pa.concat_tables([shifted, clean]))
    assert _kinds(report) == {("arm", "proprio", 2, "location_shift")}
    assert [g.robot_type for g in report.groups] == ["arm", "humanoid"]


def test_a_single_odd_episode_is_not_drift_but_small_baselines_are_reported():
    report = drift_check(_episodes(60, seed=1, mutate=lambda p: p * 57.3, last=1))
    assert report.ok
    small = drift_check(_episodes(25, seed=1), DriftConfig(recent_episodes=20))
    assert small.ok and not small.groups[0].checked and "fewer than min_baseline" in small.groups[0].note


def test_dim_change_is_flagged():
    base = _episodes(40, seed=0)
    wide = _episodes(5, seed=9, mutate=lambda p: np.concatenate([p, p[:, :1]], axis=1), last=5)
    wide = wide.set_column(0, "episode_id", pa.array([f"wide-{i}" for i in range(5)]))
    start = wide.schema.get_field_index("start_time_ns")
    wide = wide.set_column(start, "start_time_ns", pa.array([2 * 10**18 + i for i in range(5)], pa.int64()))
    report = drift_check(pa.concat_tables([base, wide.cast(EPISODES_SCHEMA)]))
    dim_change = [f for f in report.findings if f.kind == "dim_change"]
    assert len(dim_change) == 1 and len(dim_change[0].episodes) == 5


def test_config_is_validated():
    with pytest.raises(ValueError, match="order_by"):
        DriftConfig(order_by="robot_id")
    with pytest.raises(ValueError, match="recent_episodes"):
        DriftConfig(recent_episodes=0)
    with pytest.raises(ValueError, match="min_fraction"):
        DriftConfig(min_fraction=0)


def test_lake_drift_report_html_json_and_cli(tmp_path, monkeypatch, capsys):
    lake = tmp_path / "lake"
    episodes = f"{lake}/episodes"
    write_deltalake(episodes, _episodes(50, seed=5, mutate=lambda p: p * 57.3, last=15).slice(0, 35))
    clean = check_lake_drift(str(lake), DriftConfig(recent_episodes=10))
    assert clean.ok and clean.version == 0
    write_deltalake(
        episodes, _episodes(50, seed=5, mutate=lambda p: p * 57.3, last=15).slice(35), mode="append"
    )
    report = check_lake_drift(str(lake), DriftConfig(recent_episodes=10))
    assert not report.ok and report.version == 1
    html_path, json_path = write_drift_report(report, tmp_path / "out")
    page = html_path.read_text()
    assert "scale_shift" in page and "arm-049" in page
    assert json.loads(json_path.read_text())["ok"] is False

    monkeypatch.setenv("PILAKE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PILAKE_LAKE", str(lake))
    assert main(["drift", "--recent", "10", "--version", "0"]) == 0
    assert main(["drift", "--recent", "10"]) == 2
    out = capsys.readouterr().out
    assert "arm proprio[0] scale_shift" in out
    assert Path(out.strip().split("report: ")[-1]).is_file()
