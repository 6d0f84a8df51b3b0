"""Per-episode statistics that merge: exact moments and a tail-accurate quantile sketch.

Written once per episode at ingest (the featurizer fills the `episodes` row, SPEC.md §7.2) and
merged for any selection of episodes without reading a step (`merge_episode_stats`): a
normalizer's mean, std, q01 and q99 for 10,000 episodes in well under 0.1 s instead of a pass
over every step (17 s in memory, 31 s reading the steps, before any video: benchmarks/norm_stats).

**Moments** (count, mean, M2 = Σ(x − mean)², min, max per dimension) merge exactly (Chan et
al.'s pairwise update, vectorized over episodes): the merged mean and std equal those of the
concatenated steps up to float64 rounding, however far the values sit from zero (the old
E[x²] − mean² pooling from float32 means/stds cancels catastrophically for offset data).

**Quantiles** do not merge from per-episode quantiles: averaging per-episode q99s is how a
merged q99 of 13.59° was once stored where the true value was 39.25°. Each episode keeps
instead a *rank sketch*: the order statistics at a fixed grid of ranks that is geometric towards
both tails (ranks 0, δ, δρ, δρ², …, ½ and mirrored, δ = 0.001, ρ = 1.5: 35 knots). Merging
treats the knots of all episodes as one weighted point set — knot k of an episode of n steps
stands for the steps whose rank is nearer to it than to its neighbours — and reads quantiles off
its cumulative masses: a pure function of the rows, exact with respect to that step function,
no randomness in the result. The error is deterministic and bounded (`rank_error_bound`): an
episode's step function is off by at most half the rank gap around a point, that gap is at
most (ρ − 1)·rank (or δ in the first cell), and the episodes' ranks at the merged q01 average
to 0.01, so |rank(q01 estimate) − 0.01| ≤ 0.40% + 0.67/s̄ for any data, s̄ being the mean steps
per episode (0.44% at 1,650 steps, 1.07% at 100: the target of ≤ 1% holds from ~111 steps on);
typical errors are ~100x smaller. The sketch is built for the tails (normalization quantiles): the
bound grows towards the median (see `rank_error_bound`).

Why not KLL/t-digest/histograms (measured in benchmarks/norm_stats): merging 10,000 × 28
sketch objects through a Python binding costs seconds; fixed-edge histograms need edges known
at ingest for every robot and joint, and relative-error (log) buckets lose the spread of a
joint that barely moves around a large offset, which is exactly what normalization divides by.
Here every merge is a few vectorized passes over one float32 array (`_merge` says how).

Layout of one sketch (`encode_sketch`, little-endian): 16-byte header — magic b"PIQS", u8
version (1), u8 grid id (1), u16 knots K, u16 dims D, u16 reserved (0), u32 count n — then
D × K float32 knot values, dimension-major (the K knots of dimension 0, then of dimension 1, ...:
a dimension's knots are contiguous, which keeps the merge's searches within a cache line or
two). Knot k of a dimension is its order statistic of index round(grid[k] · (n − 1)).

Modules: `_grid` (the rank grid, knot masses, the error bound), `_bytes` (encoding and decoding
the sketch bytes), `_episode` (one episode's statistics at ingest), `_merge` (merging moments and
quantiles), `_walk` (the last step of a quantile: the knots inside its bracket), `_rows`
(`merge_norm_stats` over episodes rows), `_weighted` (quantiles of a weighted mixture of
selections: `merge_weighted_quantiles`, bounded by `mixture_rank_error_bound`), `_errors`.
"""

from __future__ import annotations

from pi_format.stats._bytes import (
    SKETCH_HEADER_BYTES,
    SKETCH_MAGIC,
    SKETCH_VERSION,
    Sketches,
    decode_sketches,
    encode_sketch,
)
from pi_format.stats._episode import EpisodeSummary, episode_stat_columns, summarize
from pi_format.stats._errors import MissingSketchError, SketchError
from pi_format.stats._grid import (
    GRID_V1,
    GRIDS,
    SketchGrid,
    cumulative_masses,
    knot_indices,
    mixture_rank_error_bound,
    rank_error_bound,
    rank_grid,
)
from pi_format.stats._merge import NORM_QUANTILES, merge_moments, merge_quantiles
from pi_format.stats._rows import NORM_STATS_KINDS, NormStats, merge_episode_stats, merge_norm_stats
from pi_format.stats._weighted import merge_weighted_quantiles

__all__ = [
    "GRIDS",
    "GRID_V1",
    "NORM_QUANTILES",
    "NORM_STATS_KINDS",
    "SKETCH_HEADER_BYTES",
    "SKETCH_MAGIC",
    "SKETCH_VERSION",
    "EpisodeSummary",
    "MissingSketchError",
    "NormStats",
    "SketchError",
    "SketchGrid",
    "Sketches",
    "cumulative_masses",
    "decode_sketches",
    "encode_sketch",
    "episode_stat_columns",
    "knot_indices",
    "merge_episode_stats",
    "merge_moments",
    "merge_norm_stats",
    "merge_quantiles",
    "merge_weighted_quantiles",
    "mixture_rank_error_bound",
    "rank_error_bound",
    "rank_grid",
    "summarize",
]
