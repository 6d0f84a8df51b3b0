"""The normalizer's statistics: pooled from the episodes table, equal to a pass over the steps."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
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
