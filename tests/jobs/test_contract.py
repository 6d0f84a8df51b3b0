"""The ingest contract's pure checks (pi_jobs.stream.contract) and the robot registry file."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pi_format import ProtocolError, QuarantineReason
from pi_jobs.stream.contract import (
    RegistryError,
    RobotType,
    check_episode,
    check_monotonic,
    check_rate,
    find_violations,
    load_registry,
    parse_registry,
)

from tests.jobs.contract_episodes import make_episode, with_arrays

R = QuarantineReason


@pytest.fixture(scope="module")
def registry():  # -> RobotRegistry
    return load_registry(None)


def reasons(episode, registry) -> list[str]:
    return [v.reason.value for v in find_violations(episode, registry)]


def test_packaged_registry_knows_the_simulator_robot_and_pickles(registry) -> None:
    from pi_ingest.simulator import SimulationConfig

    assert SimulationConfig().robot_type in registry.names
    assert {"aloha", "franka", "ur5e"} <= set(registry.names)
    again = pickle.loads(pickle.dumps(registry))
    assert again == registry and again.get("aloha") == registry.get("aloha")


def test_simulated_episode_passes_the_contract(registry) -> None:
    from pi_ingest.simulator import SimulationConfig, simulate_episode

    sim = simulate_episode(SimulationConfig(duration_s=1.0, seed=3), robot_index=0, episode_index=0)
    assert find_violations(sim.episode, registry) == []


def test_a_valid_episode_passes(registry) -> None:
    check_episode(make_episode("ok"), registry)


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"robot_type": "mystery_bot"}, R.UNKNOWN_ROBOT_TYPE),
        ({"step_period_ns": int(2e9 / 15.0)}, R.BAD_RATE),  # declared 15 Hz, sent at 7.5 Hz
    ],
)
def test_meta_level_violations(registry, change: dict, reason: QuarantineReason) -> None:
    with pytest.raises(ProtocolError) as info:
        check_episode(make_episode("bad", **change), registry)
    assert info.value.reason is reason


def test_non_finite_values_are_bad_values(registry) -> None:
    ep = make_episode("nan")
    action = ep.action.copy()
    action[3, 1] = np.inf
    assert reasons(with_arrays(ep, action=action), registry) == ["bad_values"]
    proprio = ep.proprio.copy()
    proprio[0, 0] = np.nan
    found = find_violations(with_arrays(ep, proprio=proprio), registry)
    assert found[0].reason is R.BAD_VALUES and "step 0 dim 0" in found[0].detail


def test_value_outside_the_robot_range_is_out_of_range(registry) -> None:
    ep = make_episode("range")
    proprio = ep.proprio.copy()
    proprio[5, 2] = 50.0
    found = find_violations(with_arrays(ep, proprio=proprio), registry)
    assert [v.reason for v in found] == [R.OUT_OF_RANGE]
    assert "proprio[5, 2] = 50.0" in found[0].detail and "6.2832" in found[0].detail


def test_registry_dims_and_rates_are_enforced() -> None:
    strict = RobotType(
        "aloha",
        proprio_range=(-10, 10),
        action_range=(-10, 10),
        control_rate_hz=(20.0, 60.0),
        camera_fps=(5.0, 8.0),
        proprio_dim=14,
        action_dim=2,
    )
    from pi_jobs.stream.contract import RobotRegistry

    found = find_violations(make_episode("dims"), RobotRegistry((strict,)))
    details = " | ".join(v.detail for v in found)
    assert {v.reason for v in found} == {R.OUT_OF_RANGE}
    assert "proprio_dim = 4, robot type 'aloha' has 14" in details
    assert "control_rate_hz = 15" in details and "fps = 10" in details
    assert "action_dim" not in details


def test_unordered_timestamps(registry) -> None:
    ep = make_episode("ts")
    ts = ep.timestamps_ns.copy()
    ts[[4, 5]] = ts[[5, 4]]
    assert reasons(with_arrays(ep, timestamps_ns=ts), registry) == ["bad_timestamps"]
    assert list(check_monotonic("t", np.array([0, 1, 1]))) != []


def test_a_long_gap_is_bad_rate_even_when_the_mean_rate_is_fine() -> None:
    period = 20_000_000
    ts = np.arange(200, dtype=np.int64) * period
    ts[100:] += 6 * period  # one stall of 7 periods; the mean rate is 3% off
    found = list(check_rate("steps", ts, 50.0, tolerance=0.05, max_gap_periods=5.0))
    assert len(found) == 1 and "gap of 140.0 ms" in found[0].detail
    assert list(check_rate("steps", ts, 50.0, tolerance=0.05, max_gap_periods=8.0)) == []


def test_message_lists_every_violation(registry) -> None:
    ep = make_episode("many", robot_type="mystery_bot")
    proprio = ep.proprio.copy()
    proprio[1, 1] = np.nan
    with pytest.raises(ProtocolError, match=r"also \[unknown_robot_type\]") as info:
        check_episode(with_arrays(ep, proprio=proprio), registry)
    assert info.value.reason is R.BAD_VALUES


@settings(max_examples=60, deadline=None)
@given(
    rate_hz=st.floats(1.0, 2000.0),
    n=st.integers(2, 400),
    jitter=st.floats(0.0, 0.3),
    seed=st.integers(0, 2**32 - 1),
)
def test_rate_check_jitter_vs_wrong_rate(rate_hz: float, n: int, jitter: float, seed: int) -> None:
    rng = np.random.default_rng(seed)
    period = 1e9 / rate_hz
    # jitter of up to 30% of a period around each nominal time keeps order and the mean rate
    # within (2 * 0.3 / (n - 1)) of nominal
    ts = np.round(np.arange(n) * period + rng.uniform(-jitter, jitter, n) * period / 2).astype(np.int64)
    ok = list(check_rate("t", ts, rate_hz, tolerance=0.35, max_gap_periods=2.0))
    assert ok == []
    wrong = list(check_rate("t", ts, rate_hz * 2.5, tolerance=0.35, max_gap_periods=2.0))
    assert [v.reason for v in wrong] == [R.BAD_RATE]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(-(2**62), 2**62), min_size=0, max_size=50))
def test_monotonic_check_agrees_with_numpy(values: list[int]) -> None:
    ts = np.array(values, dtype=np.int64)
    increasing = len(values) < 2 or bool(np.all(np.diff(ts) > 0))
    assert (list(check_monotonic("t", ts)) == []) == increasing


def test_registry_file_errors_name_the_problem(tmp_path: Path) -> None:
    with pytest.raises(RegistryError, match="cannot read the robot registry"):
        load_registry(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[robot_types.x\n")
    with pytest.raises(RegistryError, match="not valid TOML"):
        load_registry(bad)
    with pytest.raises(RegistryError, match="unknown keys \\['proprio_rnge'\\]"):
        parse_registry({"robot_types": {"x": {"proprio_rnge": [0, 1]}}})
    with pytest.raises(RegistryError, match="action_range must be a list"):
        parse_registry(
            {"robot_types": {"x": {"proprio_range": [0, 1], "control_rate_hz": [1, 2], "camera_fps": [1, 2]}}}
        )
    with pytest.raises(RegistryError, match="low <= high"):
        parse_registry(
            {
                "robot_types": {
                    "x": {
                        "proprio_range": [1, 0],
                        "action_range": [0, 1],
                        "control_rate_hz": [1, 2],
                        "camera_fps": [1, 2],
                    }
                }
            }
        )
    with pytest.raises(RegistryError, match="needs a \\[robot_types"):
        parse_registry({})


def test_registry_dimension_names(tmp_path: Path) -> None:
    entry = {"proprio_range": [0, 1], "action_range": [0, 1], "control_rate_hz": [1, 2], "camera_fps": [1, 2]}
    named = parse_registry({"robot_types": {"x": {**entry, "proprio_names": ["a", "b"], "proprio_dim": 2}}})
    assert named.get("x").proprio_names == ("a", "b") and named.get("x").action_names == ()  # type: ignore[union-attr]
    assert load_registry(None).get("franka").proprio_names[-1] == "gripper_width"  # type: ignore[union-attr]
    for names, match in (
        ("ab", "must be a list"),
        (["a", 3], "names of 1-128"),
        (["a"], "1 proprio_names for 2"),
    ):
        with pytest.raises(RegistryError, match=match):
            parse_registry({"robot_types": {"x": {**entry, "proprio_names": names, "proprio_dim": 2}}})


def test_registry_defaults_apply_to_entries(tmp_path: Path) -> None:
    path = tmp_path / "robots.toml"
    path.write_text(
        "[defaults]\nrate_tolerance = 0.2\n[robot_types.bot]\nproprio_range = [-1, 1]\n"
        "action_range = [-1, 1]\ncontrol_rate_hz = [1, 100]\ncamera_fps = [1, 60]\nmax_gap_periods = 3\n"
    )
    bot = load_registry(path).get("bot")
    assert bot is not None and (bot.rate_tolerance, bot.max_gap_periods) == (0.2, 3.0)


# -- the video part of the contract (featurize) -------------------------------------------------
def test_video_of_another_size_than_declared_is_bad_video() -> None:
    from pi_jobs.stream.featurize import FeaturizeConfig, featurize

    config = FeaturizeConfig(video_width=32, video_height=32, chunk_frames=4)
    kwargs: dict[str, Any] = {
        "attempt_id": "a",
        "received_at_ns": 0,
        "raw_size_bytes": 0,
        "committed_at_ns": 0,
    }
    ok = featurize(make_episode("vid"), config=config, **kwargs)
    assert ok.video.num_rows == 2  # 6 frames in chunks of 4, each verified by decoding
    with pytest.raises(ProtocolError, match="is 32x24, the meta declares 64x48") as info:
        featurize(make_episode("vid", video_size=(32, 24)), config=config, **kwargs)
    assert info.value.reason is R.BAD_VIDEO
