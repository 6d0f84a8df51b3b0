"""Normalization statistics of a `Mixture`: its sources' own (`Dataset.norm_stats()`) merged
into the statistics of the mixture distribution, each source counting in proportion to its
weight, not its size (a source of 10x the steps at weight 0.3 is still 30% of the mixture).

Moments merge exactly from the sources' (count-free: mean and E[x²] weighted by w_i). q01/q99
are the quantiles of the weighted mixture of the sources' step functions, merged from every
selected episode's quantile sketch (`pi_format.stats.merge_weighted_quantiles`), within
`NormStats.rank_error_bound` (`mixture_rank_error_bound`: the bound of one selection with
episodes/steps replaced by Σ w_i E_i / N_i). A dimension only some sources have (the wider
robot's) merges over those sources, their weights renormalised, as the zero padding of samples
is masked (`*_dim_is_pad`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
from pi_format.stats import (
    NORM_QUANTILES,
    NormStats,
    Sketches,
    merge_weighted_quantiles,
    mixture_rank_error_bound,
)

from pi_loader.samples._norm_stats import read_sketches

if TYPE_CHECKING:
    from pi_loader.samples._dataset import Dataset


def mixture_norm_stats(
    sources: Sequence[Dataset], weights: Sequence[float], widths: dict[str, int]
) -> dict[str, NormStats]:
    """{"observation.state": ..., "action": ...} of the weighted mixture (module docstring);
    `widths` is the mixture's width of each key (the widest source's)."""
    per = [d.norm_stats() for d in sources]
    w = np.asarray(weights, np.float64)
    sketches: list[dict[str, Sketches | None]] | None = None
    merged: dict[str, NormStats] = {}
    for key, width in widths.items():
        stats = [p[key] for p in per]
        moments = _merge_moments(stats, w, width)
        if any(s.q01 is None or s.missing_sketches for s in stats):
            merged[key] = moments  # q01/q99 None; require_quantiles() names the episodes without
            continue
        if sketches is None:  # read once, for both keys
            sketches = [_sketches(d) for d in sources]
        groups = [s[key] for s in sketches]
        if any(g is None for g in groups):  # rows rewritten since norm_stats() was cached
            merged[key] = moments
            continue
        q01, q99 = merge_weighted_quantiles([g for g in groups if g is not None], w, NORM_QUANTILES)
        merged[key] = dataclasses.replace(moments, q01=q01, q99=q99, rank_error_bound=_bound(stats, w, width))
    return merged


def _sketches(d: Dataset) -> dict[str, Sketches | None]:
    # the dataset's own pinned snapshot, read as Dataset.norm_stats() reads it
    return read_sketches(d.lake, d._storage, d.snapshot, d.__dict__.get("_storage_options"))


def _bound(stats: Sequence[NormStats], w: np.ndarray, width: int) -> float:
    """The worst bound over the dimensions (each merges over the sources that have it)."""
    worst = 0.0
    for d in sorted({0} | {len(s.mean) for s in stats if len(s.mean) < width}):
        members = [i for i, s in enumerate(stats) if len(s.mean) > d]
        for q in NORM_QUANTILES:
            worst = max(
                worst,
                mixture_rank_error_bound(
                    q, w[members], [stats[i].episodes for i in members], [stats[i].count for i in members]
                ),
            )
    return worst


def _merge_moments(stats: Sequence[NormStats], weights: np.ndarray, width: int) -> NormStats:
    """Mean, std, min and max of the weighted mixture (per dimension over the sources that have
    it); q01/q99 None."""
    mean = np.zeros(width)
    second = np.zeros(width)
    lo = np.full(width, np.inf)
    hi = np.full(width, -np.inf)
    total = np.zeros(width)
    for s, w in zip(stats, weights, strict=True):
        d = len(s.mean)
        mean[:d] += w * s.mean
        second[:d] += w * (s.std**2 + s.mean**2)
        lo[:d] = np.minimum(lo[:d], s.min)
        hi[:d] = np.maximum(hi[:d], s.max)
        total[:d] += w
    mean /= total
    std = np.sqrt(np.maximum(second / total - mean**2, 0.0))
    return dataclasses.replace(
        stats[0],
        episodes=sum(s.episodes for s in stats),
        count=sum(s.count for s in stats),
        mean=mean,
        std=std,
        min=lo,
        max=hi,
        q01=None,
        q99=None,
        exact=all(s.exact for s in stats),
        missing_sketches=sum(s.missing_sketches for s in stats),
        rank_error_bound=None,
    )
