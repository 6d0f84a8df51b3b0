"""The rank grid of the quantile sketch: which order statistics an episode keeps, the steps
each stands for, and the worst-case rank error of a merge on that grid."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


def rank_grid(delta: float, ratio: float) -> np.ndarray:
    """The ranks (in [0, 1]) a sketch keeps: 0, then delta·ratio^i below ½, ½, and the mirror.

    Example:
        >>> rank_grid(0.1, 2.0).tolist()
        [0.0, 0.1, 0.2, 0.4, 0.5, 0.6, 0.8, 0.9, 1.0]
    """
    if not 0 < delta < 0.5 or ratio <= 1:
        raise ValueError(f"need 0 < delta < 0.5 and ratio > 1, got delta={delta}, ratio={ratio}")
    low = [0.0]
    g = float(delta)
    while g < 0.5:
        low.append(g)
        g *= ratio
    low.append(0.5)
    lows = np.array(low, dtype=np.float64)
    return np.concatenate([lows, 1.0 - lows[-2::-1]])


@dataclass(frozen=True, slots=True)
class SketchGrid:
    """A rank grid with its id (stored in each sketch: only sketches of one grid merge)."""

    grid_id: int
    delta: float
    ratio: float

    @property
    def ranks(self) -> np.ndarray:
        return _ranks(self.delta, self.ratio)

    @property
    def knots(self) -> int:
        return len(_ranks(self.delta, self.ratio))


@functools.lru_cache(maxsize=16)
def _ranks(delta: float, ratio: float) -> np.ndarray:
    ranks = rank_grid(delta, ratio)
    ranks.flags.writeable = False
    return ranks


GRID_V1 = SketchGrid(grid_id=1, delta=1e-3, ratio=1.5)
GRIDS = {GRID_V1.grid_id: GRID_V1}


def knot_indices(count: int | np.ndarray, grid: SketchGrid = GRID_V1) -> np.ndarray:
    """Indices of the order statistics a sketch keeps for episodes of `count` steps: [K] for an
    int, [E, K] for an array of counts (non-decreasing along K; repeats for short episodes)."""
    n = np.asarray(count, dtype=np.int64)
    # (n - 1) made float64 before the product (a mixed int64 x float64 product costs ~4x more)
    at = (n - 1).astype(np.float64)[..., None] * grid.ranks
    at += 0.5  # then rounded half up, in place
    return np.floor(at, out=at).astype(np.int64)


def cumulative_masses(counts: np.ndarray, grid: SketchGrid = GRID_V1) -> np.ndarray:
    """[E, K + 1] int64: column j = the steps the first j knots of each episode stand for.

    Knot k stands for the order statistics nearer (in index) to it than to knot k + 1: the
    step function built from these masses is off by at most half an index gap anywhere.
    """
    n = np.asarray(counts, dtype=np.int64)
    idx = knot_indices(n, grid)
    out = np.zeros((len(n), idx.shape[1] + 1), dtype=np.int64)
    inner = out[:, 1:-1]  # (idx[k] + idx[k + 1]) // 2 + 1, in place (a shift: int64 floor
    np.add(idx[:, :-1], idx[:, 1:], out=inner)  # division costs ~2x more; the same for sums >= 0)
    inner >>= 1
    inner += 1
    out[:, -1] = n
    return out


def knot_masses(counts: np.ndarray, knots: np.ndarray, grid: SketchGrid = GRID_V1) -> np.ndarray:
    """[S] int64: the steps knot knots[i] of an episode of counts[i] steps stands for (the same
    as `cumulative_masses`' differences, computed for these knots only)."""
    n = np.asarray(counts, dtype=np.int64)
    k = np.asarray(knots, dtype=np.intp)
    last = grid.knots - 1

    def index(j: np.ndarray) -> np.ndarray:  # knot_indices' rounding, knot by knot
        at = grid.ranks.take(np.clip(j, 0, last)) * (n - 1).astype(np.float64)
        at += 0.5
        return np.floor(at, out=at).astype(np.int64)

    def cumulative(j: np.ndarray) -> np.ndarray:  # column j of cumulative_masses
        inner = index(j - 1) + index(j)
        inner >>= 1
        inner += 1
        return np.where(j == 0, 0, np.where(j > last, n, inner))

    return cumulative(k + 1) - cumulative(k)


def rank_error_bound(q: float, episodes: int, steps: int, grid: SketchGrid = GRID_V1) -> float:
    """Worst case |F(x̂)/N − q| of a merged quantile (F: the exact CDF of all steps, ties taken
    in the estimate's favour), for any data: with a = (ρ − 1)/2, e = (δ + episodes/steps)/2 and
    p = min(q, 1 − q), it is max(p − (p − e)/(1 + a), (p + e)/(1 − a) − p).

    Example:
        >>> round(rank_error_bound(0.01, 10_000, 16_500_000), 4)
        0.0044
    """
    return _bound(q, episodes / steps, grid)


def mixture_rank_error_bound(
    q: float,
    weights: Sequence[float] | np.ndarray,
    episodes: Sequence[int],
    steps: Sequence[int],
    grid: SketchGrid = GRID_V1,
) -> float:
    """Worst case |G(x̂) − q| of a quantile of a weighted mixture (`merge_weighted_quantiles`;
    G(x) = Σ w_i F_i(x) / N_i over the groups, w normalised to sum 1, ties in the estimate's
    favour): `rank_error_bound` with episodes/steps replaced by Σ w_i E_i / N_i. Each episode's
    step function is off by at most a·F_e(x) + (δ·n_e + 1)/2 steps; weighting episode e by
    w_i / N_i and adding up gives |Ĝ − G| <= a·G + (δ + Σ w_i E_i / N_i)/2, as for one selection.

    Example:
        >>> round(mixture_rank_error_bound(0.01, [0.7, 0.3], [100, 10], [30_000, 200]), 4)
        0.0156
    """
    if not len(weights) == len(episodes) == len(steps) or not len(weights):
        raise ValueError(
            f"weights, episodes and steps need one entry per group, got {len(weights)}, "
            f"{len(episodes)} and {len(steps)}"
        )
    w = np.asarray(weights, dtype=np.float64)
    if not (np.isfinite(w).all() and (w > 0).all()):
        raise ValueError(f"weights must be finite and > 0, got {w.tolist()}")
    per_step = np.asarray(episodes, dtype=np.float64) / np.asarray(steps, dtype=np.float64)
    return _bound(q, float((w / w.sum()) @ per_step), grid)


def _bound(q: float, episodes_per_step: float, grid: SketchGrid) -> float:
    p = min(q, 1.0 - q)
    a = (grid.ratio - 1.0) / 2.0
    e = (grid.delta + episodes_per_step) / 2.0
    return max(p - (p - e) / (1.0 + a), (p + e) / (1.0 - a) - p)
