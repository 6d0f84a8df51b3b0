"""Quantiles of a weighted mixture of sketched selections (pi_format.stats._weighted): the
definition (a pure function of every knot, weighted by its selection's weight over its size),
the proven bound against the exact weighted quantiles of the values themselves, and a
selection's weight, not its size, deciding its part."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pi_format import stats as S
from pi_format.stats import _weighted as WQ

from tests.format.test_stats import datasets

QS = (0.0, 0.001, 0.01, 0.05, 0.5, 0.95, 0.99, 0.999, 1.0)


@st.composite
def mixtures(draw: st.DrawFn) -> tuple[list[list[np.ndarray]], list[float]]:
    """2-4 selections (episodes of one width each; widths may differ) and their weights."""
    n = draw(st.integers(2, 4))
    groups = [draw(datasets(max_episodes=8, max_steps=300)) for _ in range(n)]
    weights = draw(st.lists(st.floats(0.01, 100.0), min_size=n, max_size=n))
    return groups, weights


def _sketches(groups: list[list[np.ndarray]]) -> list[S.Sketches]:
    return [S.decode_sketches([S.encode_sketch(e) for e in g]) for g in groups]


def weighted_rank_error(values: list[np.ndarray], shares: np.ndarray, x: float, q: float) -> float:
    """Distance of q from the interval [G(< x), G(<= x)] of the exact mixture CDF, each value of
    selection i weighing shares[i] / len(values[i])."""
    below = sum(s * float((v < x).mean()) for v, s in zip(values, shares, strict=True))
    upto = sum(s * float((v <= x).mean()) for v, s in zip(values, shares, strict=True))
    return max(0.0, below - q, q - upto)


def brute_weighted(sketches: list[S.Sketches], weights: list[float], q: float, d: int) -> float:
    """The definition, computed by sorting every knot of the groups that have dimension d."""
    members = [i for i, s in enumerate(sketches) if s.knots.shape[1] > d]
    w = np.asarray([weights[i] for i in members]) / sum(weights[i] for i in members)
    if q in (0.0, 1.0):
        ends = [sketches[i].knots[:, d, 0 if q == 0 else -1] for i in members]
        return float(min(e.min() for e in ends) if q == 0 else max(e.max() for e in ends))
    v = np.concatenate([sketches[i].knots[:, d, :].ravel() for i in members])
    m = np.concatenate(
        [
            (np.diff(S.cumulative_masses(sketches[i].counts), axis=1) / sketches[i].counts.sum() * wi).ravel()
            for i, wi in zip(members, w, strict=True)
        ]
    )
    order = np.argsort(v if q <= 0.5 else -v, kind="stable")
    at = np.searchsorted(np.cumsum(m[order]), (q if q <= 0.5 else 1 - q) - 1e-12, side="left")
    return float(v[order][min(int(at), len(v) - 1)])


@given(mixtures())
@settings(max_examples=60, deadline=None)
def test_merge_is_the_weighted_step_function_of_every_knot(
    mix: tuple[list[list[np.ndarray]], list[float]],
) -> None:
    groups, weights = mix
    sk = _sketches(groups)
    got = S.merge_weighted_quantiles(sk, weights, QS)
    width = max(s.knots.shape[1] for s in sk)
    assert got.shape == (len(QS), width)
    for j, q in enumerate(QS):
        for d in range(width):
            assert got[j, d] == brute_weighted(sk, weights, q, d), (q, d)


@given(mixtures(), st.sampled_from([(1, 1), (2, 3), (16, 7)]))
@settings(max_examples=60, deadline=None)
def test_counting_into_cells_first_changes_nothing(
    mix: tuple[list[list[np.ndarray]], list[float]], limits: tuple[int, int]
) -> None:
    # the merge sorts only the cell where the mass reaches the goal once candidates are many:
    # forced here on small data with few cells (one cell, or most keys in one)
    groups, weights = mix
    sk = _sketches(groups)
    expected = S.merge_weighted_quantiles(sk, weights, QS)
    saved = (WQ._DIRECT, WQ._CELLS)
    WQ._DIRECT, WQ._CELLS = limits
    try:
        assert np.array_equal(S.merge_weighted_quantiles(sk, weights, QS), expected)
    finally:
        WQ._DIRECT, WQ._CELLS = saved


@given(mixtures(), st.sampled_from([0.01, 0.05, 0.99, 0.95]))
@settings(max_examples=80, deadline=None)
def test_rank_error_stays_within_the_mixture_bound(
    mix: tuple[list[list[np.ndarray]], list[float]], q: float
) -> None:
    groups, weights = mix
    got = S.merge_weighted_quantiles(_sketches(groups), weights, [q])[0]
    for d in range(len(got)):
        members = [i for i, g in enumerate(groups) if g[0].shape[1] > d]
        w = np.asarray([weights[i] for i in members])
        bound = S.mixture_rank_error_bound(
            q, w, [len(groups[i]) for i in members], [sum(len(e) for e in groups[i]) for i in members]
        )
        values = [np.concatenate(groups[i])[:, d] for i in members]
        assert weighted_rank_error(values, w / w.sum(), float(got[d]), q) <= bound + 1e-12


def test_weight_not_size_decides_a_selections_part() -> None:
    # 100 calm episodes and 3 wild ones at 50/50: by size the wild steps are 3% of the mixture
    # and move nothing below q99; by weight they are half of it
    rng = np.random.default_rng(3)
    calm = [rng.normal(0, 1, (500, 2)).astype(np.float32) for _ in range(100)]
    wild = [rng.normal(50, 1, (500, 2)).astype(np.float32) for _ in range(3)]
    sk = _sketches([calm, wild])
    q01, q99 = S.merge_weighted_quantiles(sk, [1.0, 1.0], [0.01, 0.99])
    assert (q01 < -1.5).all() and (q99 > 51).all()
    values = [np.concatenate(calm), np.concatenate(wild)]
    bound = S.mixture_rank_error_bound(0.99, [1, 1], [100, 3], [50_000, 1_500])
    for d in range(2):
        assert (
            weighted_rank_error([v[:, d] for v in values], np.array([0.5, 0.5]), float(q99[d]), 0.99) <= bound
        )
    # equal weights per step (weights = sizes) are the plain merge of every episode, within its bound
    one = S.merge_weighted_quantiles(sk, [50_000, 1_500], [0.99])[0]
    plain = S.merge_quantiles(S.decode_sketches([S.encode_sketch(e) for e in calm + wild]), [0.99])[0]
    assert np.allclose(one, plain, atol=0.5)


def test_bad_arguments_are_refused() -> None:
    sk = _sketches([[np.zeros((3, 1), np.float32)]])
    with pytest.raises(ValueError, match="one weight per group"):
        S.merge_weighted_quantiles(sk, [1.0, 2.0], [0.5])
    with pytest.raises(ValueError, match="finite and > 0"):
        S.merge_weighted_quantiles(sk, [0.0], [0.5])
    with pytest.raises(ValueError, match=r"lie in \[0, 1\]"):
        S.merge_weighted_quantiles(sk, [1.0], [1.5])
    with pytest.raises(ValueError, match="one entry per group"):
        S.mixture_rank_error_bound(0.01, [1.0], [1, 2], [3, 4])
    # the bound of one group is the plain bound
    assert S.mixture_rank_error_bound(0.01, [2.0], [10], [3000]) == S.rank_error_bound(0.01, 10, 3000)
