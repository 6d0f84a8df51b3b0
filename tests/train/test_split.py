"""The held-out split by hash of episode_id (pi_train._split): deterministic, disjoint,
independent of the rest of the selection, and refusing fractions outside (0, 1) clearly."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pi_jobs.cli import build_parser
from pi_train import SPLIT_SALT, EvalError, PiTrainError, TrainConfig, held_out_ids, split_hash

ids = st.lists(st.text(min_size=1, max_size=24), max_size=60)
fractions = st.floats(min_value=1e-6, max_value=1 - 1e-6, allow_nan=False)


def test_the_hash_is_pinned() -> None:
    # Part of the split's definition: a change of salt or hash moves episodes between sides, and
    # every run's held-out set with it. This test fails on such a change (on purpose).
    assert SPLIT_SALT == "pi-lake.eval-split/1"
    assert split_hash("ep-000") == pytest.approx(0.2321248171273765, abs=1e-15)
    assert split_hash("ep-003") == pytest.approx(0.030082570754391594, abs=1e-15)
    assert held_out_ids([f"ep-{i:03d}" for i in range(4)], 0.1) == ("ep-001", "ep-003")


@settings(max_examples=200, deadline=None)
@given(ids, fractions, st.randoms(use_true_random=False))
def test_split_is_deterministic_disjoint_and_order_free(
    episode_ids: list[str], fraction: float, rng: random.Random
) -> None:
    held = held_out_ids(episode_ids, fraction)
    shuffled = list(episode_ids)
    rng.shuffle(shuffled)
    assert held_out_ids(shuffled + shuffled[:3], fraction) == held  # order, duplicates: same split
    train = [e for e in episode_ids if e not in set(held)]
    assert set(held).isdisjoint(train) and set(held) | set(train) == set(episode_ids)
    assert all((split_hash(e) < fraction) == (e in held) for e in episode_ids)
    # an episode's side depends on itself only: a sub-selection keeps its members' sides
    half = episode_ids[: len(episode_ids) // 2]
    assert held_out_ids(half, fraction) == tuple(e for e in held if e in set(half))


@settings(max_examples=100, deadline=None)
@given(ids, fractions, fractions)
def test_a_larger_fraction_only_adds_episodes(episode_ids: list[str], a: float, b: float) -> None:
    low, high = sorted((a, b))
    assert set(held_out_ids(episode_ids, low)) <= set(held_out_ids(episode_ids, high))


@pytest.mark.parametrize("bad", [0, 0.0, 1, 1.0, -0.1, 1.5, math.nan, math.inf, "0.1", True, None])
def test_a_fraction_outside_the_open_interval_is_refused(bad: object) -> None:
    with pytest.raises(EvalError, match=r"strictly between 0 and 1, got .*--eval-fraction") as info:
        held_out_ids(["a"], bad)  # type: ignore[arg-type]
    assert repr(bad) in str(info.value)
    assert isinstance(info.value, PiTrainError) and isinstance(info.value, ValueError)


def test_train_config_refuses_bad_eval_options() -> None:
    with pytest.raises(EvalError, match=r"got 1\.5"):
        TrainConfig(lake="lake", eval_fraction=1.5)
    with pytest.raises(EvalError, match="not both"):
        TrainConfig(lake="lake", eval_fraction=0.1, eval_dataset="val")
    with pytest.raises(EvalError, match="--mix run is not implemented"):
        TrainConfig(lake="lake", mix=(("a", 1.0),), eval_fraction=0.1)
    with pytest.raises(EvalError, match=r"eval_every must be an int >= 0 .*got -1"):
        TrainConfig(lake="lake", eval_every=-1)
    with pytest.raises(EvalError, match=r"eval_samples .* got 0"):
        TrainConfig(lake="lake", eval_samples=0)
    with pytest.raises(EvalError, match="pin's name, got ''"):
        TrainConfig(lake="lake", eval_dataset="")
    config = TrainConfig(lake="lake", eval_fraction=0.25, eval_every=5, eval_samples=None)
    assert TrainConfig.from_json(config.to_json()) == config


def test_the_command_line_takes_and_checks_the_eval_flags(capsys: pytest.CaptureFixture[str]) -> None:
    args = build_parser().parse_args(["train", "--eval-fraction", "0.05", "--eval-every", "7"])
    assert (args.eval_fraction, args.eval_every, args.eval_samples) == (0.05, 7, 256)
    for bad in ("0", "1", "1.5", "nan", "x"):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["train", "--eval-fraction", bad])
        assert f"got {bad!r}" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        build_parser().parse_args(["train", "--eval-fraction", "0.1", "--eval-dataset", "val"])
