"""The normalizer's statistics: merged from the episodes table (mean/std or q01/q99), equal to a
pass over the steps within the sketches' bound; older lakes refuse quantiles loudly."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pytest
from pi_format import EPISODES_SCHEMA
from pi_format.stats import MissingSketchError, NormStats, episode_stat_columns, merge_norm_stats
from pi_loader import Dataset, SampleSpec, Stats
from pi_train import Normalization, normalization_stats

from tests.fixtures.lake_factory import FakeLake


def test_stats_equal_a_full_pass(train_lake: FakeLake) -> None:
    ds = Dataset(train_lake.layout.root, spec=SampleSpec(action_horizon=4))
    stats = normalization_stats(ds)
    state = np.concatenate([ep.proprio for ep in train_lake.episodes.values()])
    action = np.concatenate([ep.action for ep in train_lake.episodes.values()])
    np.testing.assert_allclose(stats.state_mean, state.mean(0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(stats.state_std, state.std(0), rtol=1e-4)
    np.testing.assert_allclose(stats.action_mean, action.mean(0), rtol=1e-5)
    np.testing.assert_allclose(stats.action_std, action.std(0), rtol=1e-4)
    assert (stats.state_dim, stats.action_dim) == (3, 2)


class _Source:
    """A dataset whose `stats` is a method (what item 5 may make it) with a constant dimension."""

    def stats(self) -> dict[str, Stats]:
        z, one = np.zeros(2, np.float32), np.ones(2, np.float32)
        return {
            "observation.state": Stats(z, one, z, one),
            "action": Stats(z, np.array([0, 2], np.float32), z, one),
        }


def test_a_stats_method_and_a_constant_dimension() -> None:
    stats = normalization_stats(_Source())
    assert isinstance(stats, Normalization)
    assert stats.action_std[0] > 0 and stats.action_std[1] == 2.0  # std 0 is clamped, not divided by


def test_missing_or_bad_stats_are_errors() -> None:
    with pytest.raises(ValueError, match=r"must hold 'observation\.state' and 'action'"):
        normalization_stats(SimpleNamespace(stats={}))
    nan = np.array([np.nan], np.float32)
    bad = {"observation.state": Stats(nan, nan, nan, nan), "action": Stats(nan, nan, nan, nan)}
    with pytest.raises(ValueError, match="not finite"):
        normalization_stats(SimpleNamespace(stats=bad))


def test_quantile_mode_maps_q01_q99_to_minus_one_one() -> None:
    # the train fixture's lake predates the sketches (see the next test): rows as the stream
    # job's featurizer writes them, merged as Dataset.norm_stats() merges them
    rng = np.random.default_rng(0)
    episodes = [
        rng.normal(rng.normal(0, 1, 3), 0.5, (int(n), 3)).astype(np.float32)
        for n in rng.integers(50, 300, 40)
    ]
    rows = pa.Table.from_pylist(
        [
            {
                "step_count": len(e),
                **episode_stat_columns("proprio", e),
                **episode_stat_columns("action", e[:, :2]),
            }
            for e in episodes
        ],
        schema=pa.schema([EPISODES_SCHEMA.field(n) for n in _FIELDS]),
    )
    merged = merge_norm_stats(rows)
    ds = SimpleNamespace(
        norm_stats=lambda: {"observation.state": merged["proprio"], "action": merged["action"]}
    )
    norm = normalization_stats(ds, "quantile")
    assert norm.mode == "quantile" and (norm.state_dim, norm.action_dim) == (3, 2)
    everything = np.concatenate(episodes)
    bound = merged["proprio"].rank_error_bound
    assert bound is not None
    for d in range(3):  # x = q01 -> -1 and q99 -> +1, q01/q99 within the sketches' rank bound
        low = norm.state_mean[d] - norm.state_std[d]
        high = norm.state_mean[d] + norm.state_std[d]
        assert abs(float(np.mean(everything[:, d] < low)) - 0.01) <= bound + 2.0 / len(everything)
        assert abs(float(np.mean(everything[:, d] > high)) - 0.01) <= bound + 2.0 / len(everything)
    exact = normalization_stats(ds)  # mean_std from the same rows: exact moments
    np.testing.assert_allclose(exact.state_mean, everything.mean(0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(exact.state_std, everything.std(0), rtol=1e-5)


_FIELDS = ["step_count"] + [
    f"{k}_{c}" for k in ("proprio", "action") for c in ("mean", "std", "min", "max", "mean64", "m2", "sketch")
]


def _norm_stats(quantiles: bool) -> dict[str, NormStats]:
    z, one = np.zeros(2), np.ones(2)
    stats = NormStats(
        episodes=3,
        count=30,
        mean=z,
        std=one,
        min=-one,
        max=one,
        q01=-one if quantiles else None,
        q99=3 * one if quantiles else None,
        exact=True,
        missing_sketches=0 if quantiles else 3,
        rank_error_bound=0.004 if quantiles else None,
    )
    return {"observation.state": stats, "action": stats}


def test_a_lake_without_sketches_refuses_quantiles_but_not_mean_std() -> None:
    old = SimpleNamespace(norm_stats=lambda: _norm_stats(quantiles=False))
    with pytest.raises(MissingSketchError, match="3 of the 3 selected episodes"):
        normalization_stats(old, "quantile")
    assert normalization_stats(old).mode == "mean_std"
    new = normalization_stats(SimpleNamespace(norm_stats=lambda: _norm_stats(quantiles=True)), "quantile")
    assert new.action_mean.tolist() == [1.0, 1.0] and new.action_std.tolist() == [2.0, 2.0]
    with pytest.raises(MissingSketchError, match="no norm_stats"):
        normalization_stats(_Source(), "quantile")
    with pytest.raises(ValueError, match="mode must be one of"):
        normalization_stats(_Source(), "minmax")
