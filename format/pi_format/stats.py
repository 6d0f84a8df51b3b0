"""Per-episode statistics that merge: exact moments and a tail-accurate quantile sketch.

Written once per episode at ingest (the featurizer fills the `episodes` row, SPEC.md §7.2) and
merged for any selection of episodes without reading a step (`merge_episode_stats`): a
normalizer's mean, std, q01 and q99 for 10,000 episodes in ~0.1 s instead of a pass over
every step (17 s in memory, 31 s reading the steps, before any video: benchmarks/norm_stats).

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
to 0.01, so |rank(q01 estimate) − 0.01| ≤ ~0.45% for any data (the target is ≤ 1%); typical
errors are ~100x smaller. The sketch is built for the tails (normalization quantiles): the
bound grows towards the median (see `rank_error_bound`).

Why not KLL/t-digest/histograms (measured in benchmarks/norm_stats): merging 10,000 × 28
sketch objects through a Python binding costs seconds; fixed-edge histograms need edges known
at ingest for every robot and joint, and relative-error (log) buckets lose the spread of a
joint that barely moves around a large offset, which is exactly what normalization divides by.
Here every merge is a few vectorized passes over one float32 array.

Layout of one sketch (`encode_sketch`, little-endian): 16-byte header — magic b"PIQS", u8
version (1), u8 grid id (1), u16 knots K, u16 dims D, u16 reserved (0), u32 count n — then
D × K float32 knot values, dimension-major (the K knots of dimension 0, then of dimension 1, ...:
a dimension's knots are contiguous, which keeps the merge's searches within a cache line or
two). Knot k of a dimension is its order statistic of index round(grid[k] · (n − 1)).
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa

from pi_format.errors import PiFormatError

SKETCH_MAGIC = b"PIQS"
SKETCH_VERSION = 1
_HEADER = struct.Struct("<4sBBHHHI")
SKETCH_HEADER_BYTES = _HEADER.size  # 16
NORM_QUANTILES = (0.01, 0.99)


class SketchError(PiFormatError, ValueError):
    """A quantile sketch that cannot be decoded or merged (bad bytes, other grid, other dims)."""


class MissingSketchError(PiFormatError):
    """Quantiles were asked of episodes whose rows predate the quantile sketches."""


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
    return np.floor(grid.ranks * (n[..., None] - 1) + 0.5).astype(np.int64)


def cumulative_masses(counts: np.ndarray, grid: SketchGrid = GRID_V1) -> np.ndarray:
    """[E, K + 1] int64: column j = the steps the first j knots of each episode stand for.

    Knot k stands for the order statistics nearer (in index) to it than to knot k + 1: the
    step function built from these masses is off by at most half an index gap anywhere.
    """
    n = np.asarray(counts, dtype=np.int64)
    idx = knot_indices(n, grid)
    out = np.zeros((len(n), idx.shape[1] + 1), dtype=np.int64)
    out[:, 1:-1] = (idx[:, :-1] + idx[:, 1:]) // 2 + 1
    out[:, -1] = n
    return out


# -- one episode ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EpisodeSummary:
    """The mergeable statistics of one feature of one episode (what its `episodes` row holds).

    Example:
        >>> s = summarize(np.array([[0.0, 1.0], [2.0, 3.0]], np.float32))
        >>> s.count, s.mean.tolist(), s.m2.tolist()
        (2, [1.0, 2.0], [2.0, 2.0])
    """

    count: int
    mean: np.ndarray  # float64 [D]
    m2: np.ndarray  # float64 [D]: sum of squared deviations from `mean`
    min: np.ndarray  # float32 [D]
    max: np.ndarray  # float32 [D]
    sketch: bytes  # encode_sketch(values)

    @property
    def std(self) -> np.ndarray:
        """Population std (ddof 0), float64."""
        return np.sqrt(self.m2 / self.count)


def _check_values(values: np.ndarray) -> np.ndarray:
    v = np.asarray(values)
    if v.ndim != 2 or v.shape[0] < 1 or v.shape[1] < 1:
        raise ValueError(f"values must be [steps >= 1, dims >= 1], got shape {v.shape}")
    if v.shape[0] > 0xFFFFFFFF or v.shape[1] > 0xFFFF:
        raise ValueError(f"values of shape {v.shape} exceed the sketch's u32 count / u16 dims")
    if not bool(np.isfinite(v).all()):
        raise ValueError("values must be finite")
    return v.astype(np.float32, copy=False)


def encode_sketch(values: np.ndarray, grid: SketchGrid = GRID_V1) -> bytes:
    """The quantile sketch of a [T, D] array (T >= 1, finite), as stored in `<kind>_sketch`."""
    v = _check_values(values)
    knots = np.sort(v, axis=0)[knot_indices(v.shape[0], grid)]
    header = _HEADER.pack(SKETCH_MAGIC, SKETCH_VERSION, grid.grid_id, grid.knots, v.shape[1], 0, v.shape[0])
    return header + np.ascontiguousarray(knots.T, dtype="<f4").tobytes()  # [D, K]


def summarize(values: np.ndarray, grid: SketchGrid = GRID_V1) -> EpisodeSummary:
    """Count, float64 mean and M2 (two-pass), float32 min/max and the sketch of a [T, D] array."""
    v = _check_values(values)
    v64 = v.astype(np.float64)
    mean = v64.mean(axis=0)
    m2 = np.square(v64 - mean).sum(axis=0)
    return EpisodeSummary(
        count=int(v.shape[0]),
        mean=mean,
        m2=m2,
        min=v.min(axis=0),
        max=v.max(axis=0),
        sketch=encode_sketch(v, grid),
    )


def episode_stat_columns(kind: str, values: np.ndarray) -> dict[str, object]:
    """The statistics columns of an `episodes` row for one feature (`kind` = "proprio" or
    "action"): `<kind>_mean/_std/_min/_max` (float32 lists), `<kind>_mean64/_m2` (float64
    lists) and `<kind>_sketch` (bytes). The stream job's featurizer calls this.

    Example:
        >>> sorted(episode_stat_columns("action", np.zeros((3, 2), np.float32)))[:3]
        ['action_m2', 'action_max', 'action_mean']
    """
    s = summarize(values)
    return {
        f"{kind}_mean": s.mean.astype(np.float32).tolist(),
        f"{kind}_std": s.std.astype(np.float32).tolist(),
        f"{kind}_min": s.min.tolist(),
        f"{kind}_max": s.max.tolist(),
        f"{kind}_mean64": s.mean.tolist(),
        f"{kind}_m2": s.m2.tolist(),
        f"{kind}_sketch": s.sketch,
    }


# -- decoding --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Sketches:
    """Decoded sketches of E episodes: `counts` [E] int64 and `knots` [E, D, K] float32
    (C-contiguous, as in the bytes). Several features decoded together
    (`decode_sketches(a, b)`) lie side by side along D."""

    counts: np.ndarray
    knots: np.ndarray
    grid: SketchGrid = GRID_V1


def _blob_rows(chunk: pa.Array) -> np.ndarray:
    """[n, L] uint8 view of a binary array whose values all have length L (no copy)."""
    if chunk.null_count:
        raise SketchError(f"{chunk.null_count} null sketch(es): select rows with sketches first")
    if pa.types.is_large_binary(chunk.type):
        off_type: type = np.int64
    elif pa.types.is_binary(chunk.type):
        off_type = np.int32
    else:
        raise SketchError(f"sketches must be binary, got {chunk.type}")
    n = len(chunk)
    buffers = chunk.buffers()
    offsets: np.ndarray = np.frombuffer(buffers[1], dtype=off_type)[chunk.offset : chunk.offset + n + 1]
    start, width = int(offsets[0]), int(offsets[1] - offsets[0])
    # equal sizes: the rows then start every `width` bytes (checked in full when the total
    # disagrees; otherwise a shifted row would fail the per-row header check of the caller)
    if int(offsets[-1]) - start != n * width:
        lengths = np.diff(offsets)
        raise SketchError(f"sketches of different sizes ({sorted(set(lengths.tolist()))[:4]} bytes)")
    if width < SKETCH_HEADER_BYTES:
        raise SketchError(f"a sketch of {width} bytes is shorter than its header")
    data = np.frombuffer(buffers[2], dtype=np.uint8)
    return data[start : start + n * width].reshape(n, width)


def _sketch_rows(
    blobs: pa.Array | pa.ChunkedArray | Sequence[bytes],
) -> tuple[list[np.ndarray], SketchGrid, int]:
    """The sketches of one column as [n, L] byte views, one per chunk (no copy), checked:
    (views, grid, dims)."""
    if isinstance(blobs, pa.ChunkedArray):
        chunks = [c for c in blobs.chunks if len(c)]
    elif isinstance(blobs, pa.Array):
        chunks = [blobs] if len(blobs) else []
    else:
        chunks = [pa.array(list(blobs), type=pa.binary())] if len(blobs) else []
    if not chunks:
        raise SketchError("no sketches to decode")
    views = [_blob_rows(c) for c in chunks]
    widths = {v.shape[1] for v in views}
    if len(widths) != 1:
        raise SketchError(f"sketches of different sizes ({sorted(widths)} bytes)")
    width = widths.pop()
    first = views[0][0]
    magic, version, grid_id, k, d, _, _ = _HEADER.unpack(first[:SKETCH_HEADER_BYTES].tobytes())
    if magic != SKETCH_MAGIC or version != SKETCH_VERSION or grid_id not in GRIDS:
        raise SketchError(
            f"not a v{SKETCH_VERSION} quantile sketch (magic {magic!r}, version {version}, grid {grid_id})"
        )
    grid = GRIDS[grid_id]
    if k != grid.knots or width != SKETCH_HEADER_BYTES + 4 * k * d:
        raise SketchError(f"sketch of {k} knots x {d} dims does not fit its {width} bytes")
    return views, grid, d


def decode_sketches(*columns: pa.Array | pa.ChunkedArray | Sequence[bytes]) -> Sketches:
    """Decode the sketches of one or more features of the same E episodes (e.g. the
    `proprio_sketch` and `action_sketch` columns) into one [E, D1 + D2 + ..., K] array (one
    copy of the knots, straight from each Arrow chunk).

    Raises:
        SketchError: a null, a bad header, different grids/dims within a column, columns of
            different episodes (step counts), or a size that does not match.
    """
    if not columns:
        raise SketchError("no sketch column to decode")
    parts = [_sketch_rows(c) for c in columns]
    if len({grid.grid_id for _, grid, _ in parts}) != 1:
        raise SketchError("sketch columns of different grids")
    e = sum(len(v) for v in parts[0][0])
    if any(sum(len(v) for v in views) != e for views, _, _ in parts):
        raise SketchError("sketch columns of different lengths")
    grid = parts[0][1]
    total_d = sum(d for _, _, d in parts)
    out = np.empty((e, total_d, grid.knots), dtype=np.float32)
    heads = np.empty((len(parts), e, 4), dtype="<u4")  # magic, version..K, D.., count
    at = 0
    for i, (views, _, d) in enumerate(parts):  # one C loop over the chunks per column
        np.concatenate([v[:, :SKETCH_HEADER_BYTES].view("<u4") for v in views], out=heads[i])
        payload = [v[:, SKETCH_HEADER_BYTES:].view("<f4").reshape(len(v), d, grid.knots) for v in views]
        np.concatenate(payload, out=out[:, at : at + d])
        at += d
    # within a column: one magic, version, grid, K, D in every sketch; across columns: one count
    if (heads[:, :, :3] != heads[:, :1, :3]).any():
        raise SketchError("sketches of different grids or dimensions: select one robot type")
    if (heads[:, :, 3] != heads[:1, :, 3]).any():
        raise SketchError("sketch columns disagree on the episodes' step counts")
    counts = heads[0, :, 3].astype(np.int64)
    if (counts < 1).any():
        raise SketchError("a sketch of an empty episode")
    return Sketches(counts=counts, knots=out, grid=grid)


# -- merging ---------------------------------------------------------------------------------


def merge_moments(
    counts: np.ndarray, means: np.ndarray, m2s: np.ndarray
) -> tuple[int, np.ndarray, np.ndarray]:
    """Exact merge of per-episode (count, mean, M2): returns (N, mean [D], M2 [D]) in float64.

    Example:
        >>> n, mean, m2 = merge_moments(np.array([2, 1]), np.array([[1.0], [4.0]]), np.array([[2.0], [0.0]]))
        >>> n, mean.tolist(), m2.tolist()   # of [0, 2, 4]
        (3, [2.0], [8.0])
    """
    n = np.asarray(counts, dtype=np.float64)
    mu = np.asarray(means, dtype=np.float64)
    total = float(n.sum())
    if total <= 0:
        raise ValueError("no steps to merge")
    mean = (n @ mu) / total
    m2 = np.asarray(m2s, dtype=np.float64).sum(axis=0) + n @ np.square(mu - mean)
    return int(total), mean, m2


def rank_error_bound(q: float, episodes: int, steps: int, grid: SketchGrid = GRID_V1) -> float:
    """Worst case |F(x̂)/N − q| of a merged quantile (F: the exact CDF of all steps, ties taken
    in the estimate's favour), for any data: with a = (ρ − 1)/2, e = (δ + episodes/steps)/2 and
    p = min(q, 1 − q), it is max(p − (p − e)/(1 + a), (p + e)/(1 − a) − p).

    Example:
        >>> round(rank_error_bound(0.01, 10_000, 16_500_000), 4)
        0.0044
    """
    p = min(q, 1.0 - q)
    a = (grid.ratio - 1.0) / 2.0
    e = (grid.delta + episodes / steps) / 2.0
    return max(p - (p - e) / (1.0 + a), (p + e) / (1.0 - a) - p)


# Random knots whose mass-weighted CDF models where quantiles lie: it only chooses where the
# exact passes probe, so it changes how much work a merge does, never its result.
_MODEL_KNOTS = 4096
# Where an exact pass probes, in standard errors of the model around its estimate: the
# nearest two around the answer bound it, so more probes leave fewer knots between.
_PROBES: tuple[float, ...] = (-2.0, 2.0)
# A pass compares up to _SCAN whole columns of knots from the tail side, fewer once at most
# 1/_FEW of the (test, episode) pairs still pass, then searches those pairs' other knots.
_FEW = 64
_SCAN = 2
# Exact passes over every episode narrow each quantile's bracket until the knots inside it
# number at most _COMPACT in all (then only those are worked on), for at most _FULL_PASSES.
_COMPACT = 1 << 21
_FULL_PASSES = 6


class _Merge:
    """One merge of E sketches: the exact step function of all their knots, evaluated column
    by column (each a vectorized pass over the E episodes; a column of knots, [D, E], is
    transposed out of the [E, D, K] knots the first time a pass needs it: near a tail, passes
    touch few columns)."""

    def __init__(self, sketches: Sketches) -> None:
        self.raw = np.ascontiguousarray(sketches.knots, dtype=np.float32)  # [E, D, K]
        self.flat = self.raw.reshape(-1)
        self.e, self.d, self.k = self.raw.shape
        self._columns: dict[int, np.ndarray] = {}
        self.total = int(sketches.counts.sum())
        cum = cumulative_masses(sketches.counts, sketches.grid)  # [E, K + 1]
        # an episode's masses fit int32 (counts are u32 < 2^31 in practice); sums are int64
        small = int(sketches.counts.max()) < 2**31
        self.cum = cum.astype(np.int32) if small else cum
        self.flat_cum = self.cum.ravel()
        # mass of the top j knots: n − cum[K − j]
        top = sketches.counts[:, None] - cum[:, ::-1]
        self.flat_top = (top.astype(np.int32) if small else top).ravel()
        self.row = np.arange(self.e, dtype=np.intp) * (self.k + 1)

    def column(self, k: int) -> np.ndarray:
        """Knot k of every (dim, episode): [D, E], contiguous."""
        col = self._columns.get(k)
        if col is None:
            col = self._columns[k] = np.ascontiguousarray(self.raw[:, :, k].T)
        return col

    def value(self, e: np.ndarray, k: np.ndarray, d: np.ndarray) -> np.ndarray:
        """Knot k of dimension d of episode e (broadcast)."""
        return self.flat.take((e * self.d + d) * self.k + k)

    def mass(self, k: np.ndarray, e: np.ndarray) -> np.ndarray:
        """The steps knot k of episode e stands for (int64)."""
        at = e * (self.k + 1) + k
        return self.flat_cum.take(at + 1).astype(np.int64) - self.flat_cum.take(at)

    def count_le(self, x: np.ndarray, dims: np.ndarray | None, from_top: bool) -> np.ndarray:
        """Knots <= x[i] of dimension dims[i] in each episode (`from_top`: knots > x[i]): int8
        [n, E] for x [n] float32 (dims None: x is [T * D], every dimension once per row).

        Knots are sorted along K: the first columns from the tail side (cached, transposed) are
        compared for every pair, at most _SCAN of them and fewer once at most 1/_FEW of the
        pairs still pass; the pairs still passing (near a tail: episodes reaching past x) are
        finished by a binary search over their remaining knots.
        """
        x = x.astype(np.float32)
        shape: tuple[int, ...]
        if dims is None:
            xs, shape = x.reshape(-1, self.d, 1), (len(x) // self.d, self.d, self.e)
        else:
            xs, shape = x[:, None], (len(x), self.e)
        op = np.greater if from_top else np.less_equal
        hits = np.zeros(shape, dtype=np.int8)
        test = np.empty(shape, dtype=bool)
        few = max(hits.size // _FEW, 1)
        done = 0
        while done < min(_SCAN, self.k):
            col = self.column(self.k - 1 - done if from_top else done)
            op(col[None] if dims is None else col[dims], xs, out=test)
            np.subtract(hits, test.view(np.int8), out=hits)
            done += 1
            if np.count_nonzero(test) <= few:
                break
        np.negative(hits, out=hits)
        hits = hits.reshape(len(x), self.e)
        if done < self.k:  # the pairs still passing: a search over their remaining knots
            # episode-major, so that the searches walk the knots in memory order
            at = np.flatnonzero(np.ascontiguousarray(test.reshape(len(x), self.e).T))
            ee, tests = np.divmod(at, len(x))
            dd = tests % self.d if dims is None else dims[tests]
            rest = self.k - done
            le = self._search_le(ee, dd, x[tests], 0 if from_top else done, rest)
            hits[tests, ee] += (rest - le if from_top else le).astype(np.int8)
        return hits

    def _search_le(self, e: np.ndarray, d: np.ndarray, x: np.ndarray, start: int, length: int) -> np.ndarray:
        """How many of knots start .. start + length − 1 of each (e, d) are <= x (branchless
        binary search: the same steps for every pair)."""
        step = 1  # a dimension's knots are contiguous
        first = (e * self.d + d) * self.k + start  # flat index of the first knot of the range
        pos = first.copy()
        probe = np.empty_like(pos)
        vals = np.empty(len(pos), dtype=np.float32)
        below = np.empty(len(pos), dtype=bool)
        n = length
        while n > 1:  # in place: no allocation per step
            half = n // 2
            np.add(pos, half * step, out=probe)
            self.flat.take(probe, out=vals)
            np.less_equal(vals, x, out=below)
            pos += below.view(np.uint8) * np.int64(half * step)
            n -= half
        self.flat.take(pos, out=vals)
        np.less_equal(vals, x, out=below)
        np.subtract(pos, first, out=pos)
        pos //= step
        return pos + below

    def mass_of(self, c: np.ndarray, from_top: bool = False) -> np.ndarray:
        """[..., n] int64: merged mass of the first (`from_top`: last) c[..., n, e] knots of
        every episode."""
        flat = c.reshape(-1, self.e)
        at = np.flatnonzero(flat)  # a pair with no knot counted adds nothing (most, near a tail)
        rows, ee = np.divmod(at, self.e)
        took = (self.flat_top if from_top else self.flat_cum).take(self.row[ee] + flat.ravel()[at])
        return np.bincount(rows, weights=took, minlength=len(flat)).astype(np.int64).reshape(c.shape[:-1])

    def model(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Sorted values [D, s] of random knots, their mass-weighted CDF [D, s] and its
        standard error [D] at each value (for the first probes' spread)."""
        rng = np.random.default_rng(0)
        size = min(_MODEL_KNOTS, self.k * self.e)
        kk = rng.integers(0, self.k, size=size)
        ee = rng.integers(0, self.e, size=size)
        s = self.raw[ee, :, kk].T  # [D, s]
        m = self.mass(kk, ee).astype(np.float64)
        order = np.argsort(s, axis=1)
        vals = np.take_along_axis(s, order, axis=1)
        w = m[order]
        msum = max(float(m.sum()), 1.0)  # knots of 1-step episodes beyond the first weigh 0
        cdf = np.cumsum(w, axis=1) / msum
        # standard error of a ratio estimate of a proportion p from weights w: sqrt(Σw²(1−p)²
        # below + Σw²p² above) / Σw, evaluated at every sample point
        w2 = np.cumsum(np.square(w), axis=1)
        below, above = w2, w2[:, -1:] - w2
        err = np.sqrt(below * np.square(1 - cdf) + above * np.square(cdf)) / msum
        return vals, cdf, err

    def quantiles(self, qs: Sequence[float]) -> np.ndarray:
        """[Q, D] for 0 < q < 1: for q <= ½ the smallest knot value x with mass(<= x) >= ⌈qN⌉,
        for q > ½ the largest with mass(>= x) >= ⌈(1 − q)N⌉.

        With Φ(x) = mass(<= x) (low tail) or mass(< x) (high tail, "< x" being "<= the float
        below x"), a bracket [lo, hi] with Φ(lo) < τ <= Φ(hi) (high tail: Φ(lo) <= τ < Φ(hi))
        is narrowed by exact passes over every episode at the probes _PROBES, placed around
        the model's estimate, until few knots lie inside (or ties keep it open: then its bound
        is checked as the answer); the knots inside are sorted alone (`_select`).
        """
        q = np.asarray(qs, dtype=np.float64)
        nq, d = len(q), self.d
        up = q > 0.5
        # integer targets (masses are integers): walk until the mass reaches ⌈qN⌉ (low tail)
        # or ⌈(1 − q)N⌉ (high tail); τ is the matching bound on Φ
        goal = np.ceil(np.where(up, (1.0 - q) * self.total, q * self.total)).astype(np.int64)
        tau = np.where(up, self.total - goal, goal)[:, None]
        vals, cdf, err = self.model()
        size = vals.shape[1]
        rows = np.arange(d)
        lo = np.full((nq, d), -np.inf, dtype=np.float32)
        hi = np.full((nq, d), np.inf, dtype=np.float32)
        phi_lo = np.zeros((nq, d), dtype=np.int64)
        phi_hi = np.full((nq, d), self.total, dtype=np.int64)
        c_lo = np.zeros((nq, d, self.e), dtype=np.int8)
        c_hi = np.full((nq, d, self.e), self.k, dtype=np.int8)
        first_min, last_max = self.column(0).min(axis=1), self.column(self.k - 1).max(axis=1)

        def position(lv: np.ndarray) -> np.ndarray:  # index of the model's quantile at levels [Q, D]
            return np.minimum(np.stack([np.count_nonzero(cdf < ll[:, None], axis=1) for ll in lv]), size - 1)

        def level(x: np.ndarray) -> np.ndarray:  # the model's CDF at x [Q, D]
            at = np.stack([np.count_nonzero(vals <= xx[:, None], axis=1) for xx in x])
            return np.where(at > 0, cdf[rows[None, :], np.maximum(at - 1, 0)], 0.0)

        def inside(p: np.ndarray) -> np.ndarray:
            """p where strictly inside (lo, hi), else a fallback that is, when one exists."""
            finite = np.isfinite(lo) & np.isfinite(hi)
            mid = np.where(finite, lo, 0.0) / 2 + np.where(finite, hi, 0.0) / 2
            alt = np.where(finite, mid, np.where(np.isinf(lo), first_min, last_max))
            return np.where((p > lo) & (p < hi), p, alt).astype(np.float32)

        # the model's standard error at q, in levels: probes at q + z of them, z in _PROBES
        spread = 1.0 * err[rows[None, :], position(np.repeat(q[:, None], d, 1))] + 1.0 / size
        cap = max(_COMPACT // (nq * d), 1)
        moved = np.ones((nq, d), dtype=bool)
        for n_pass in range(_FULL_PASSES):
            inner = (c_hi.astype(np.int32) - c_lo).sum(axis=2)
            # a bracket with few knots inside is left to _select; one that a pass could not
            # narrow (ties: no value lies strictly inside) too
            wanted = (inner > cap) & moved
            if not wanted.any():
                break
            before = lo.copy(), hi.copy()
            lv = np.repeat(q[:, None], d, 1)
            if n_pass:  # where the model's CDF, rescaled to the exact masses, puts τ
                la, lb = level(lo), np.where(np.isposinf(hi), 1.0, level(hi))
                lv = la + (tau - phi_lo) / np.maximum(phi_hi - phi_lo, 1) * (lb - la)
                spread = spread / 2.0
            at = [position(lv + z * spread) for z in _PROBES]
            probes = np.stack([inside(vals[rows[None, :], a]) for a in at])  # [P, Q, D]
            # a probe equal to an earlier one or to a bound teaches nothing (ties): NaN counts
            # nothing and moves nothing
            for i in range(len(probes)):
                same = (probes[i] == lo) | (probes[i] == hi) | (probes[:i] == probes[i]).any(axis=0)
                probes[i][same] = np.nan
            for from_top in (False, True):
                sel = wanted & (up[:, None] == from_top)
                if not sel.any():
                    continue
                sq, sd = np.nonzero(sel)
                x = probes[:, sq, sd]  # [P, n]
                if np.isnan(x).all():
                    continue
                every = bool(sel[np.unique(sq)].all())  # whole rows: no gather of dims
                x_eff = np.nextafter(x, np.float32(-np.inf)) if from_top else x
                cnt = self.count_le(x_eff.ravel(), None if every else np.tile(sd, len(x)), from_top)
                cnt = cnt.reshape(len(x), len(sq), self.e)
                mass = self.mass_of(cnt, from_top)
                if from_top:  # knots > x and their mass: turn into knots < x, Φ(x) = mass(< x)
                    cnt, mass = self.k - cnt, self.total - mass
                for p, cp, phi in zip(x, cnt, mass, strict=True):  # [n], [n, E], [n]
                    t, a, b = tau[sq, 0], lo[sq, sd], hi[sq, sd]
                    to_hi = np.where(from_top, phi > t, phi >= t)
                    to_lo = ~to_hi & (p > a)
                    to_hi &= p < b
                    i, j = sq[to_lo], sd[to_lo]
                    lo[i, j], phi_lo[i, j], c_lo[i, j] = p[to_lo], phi[to_lo], cp[to_lo]
                    i, j = sq[to_hi], sd[to_hi]
                    hi[i, j], phi_hi[i, j], c_hi[i, j] = p[to_hi], phi[to_hi], cp[to_hi]
            moved = (lo != before[0]) | (hi != before[1])
        answer = np.full((nq, d), np.nan)
        # A bracket still wide is held open by ties (a value many steps share, e.g. a gripper
        # at 0): no probe lies strictly inside. Its tail-side bound is the answer when the mass
        # strictly beyond it does not reach the goal: one more count settles it.
        stuck = (c_hi.astype(np.int32) - c_lo).sum(axis=2) > cap
        for from_top in (False, True):
            sel = stuck & (up[:, None] == from_top)
            if not sel.any():
                continue
            sq, sd = np.nonzero(sel)
            if from_top:  # the answer is lo when mass(> lo) < ⌈(1 − q)N⌉
                x = lo[sq, sd]
                beyond = self.mass_of(self.count_le(x, sd, True), True)
            else:  # the answer is hi when mass(< hi) < ⌈qN⌉
                x = hi[sq, sd]
                beyond = self.mass_of(self.count_le(np.nextafter(x, np.float32(-np.inf)), sd, False))
            tie = np.isfinite(x) & (beyond < goal[sq])
            answer[sq[tie], sd[tie]] = x[tie]
        # walked from the inner bound: Φ(lo) below (low tail), mass(>= hi) = N − Φ(hi) above
        base = np.where(up[:, None], self.total - phi_hi, phi_lo)
        open_ = np.isnan(answer)
        c_hi[~open_] = c_lo[~open_]  # no candidates for the settled ones
        found = self._select(c_lo, c_hi, base.ravel(), np.repeat(goal, d), np.repeat(up, d))
        return np.where(open_, found.reshape(nq, d), answer)

    def _select(
        self, start: np.ndarray, stop: np.ndarray, base: np.ndarray, goal: np.ndarray, up: np.ndarray
    ) -> np.ndarray:
        """Per group g = (q, dim): the knots of index [start, stop) of each episode are the
        candidates; walking them from the tail side (ascending, or descending where `up`) from
        mass base[g], the answer is the first at which the mass reaches goal[g] (NaN for a
        group without candidates). Each group's candidates are sorted once as 64-bit keys
        (order-preserving value bits, then the knot's mass), so no index sort is needed."""
        groups = len(base)
        span = (stop.astype(np.int64) - start).reshape(groups, self.e)
        gg, ee = np.nonzero(span)  # group-major
        length = span[gg, ee]
        offset = np.repeat(np.cumsum(length) - length, length)
        kk = np.repeat(start.reshape(groups, self.e)[gg, ee].astype(np.int64), length)
        kk += np.arange(len(offset)) - offset
        g, e = np.repeat(gg, length), np.repeat(ee, length)
        # walk order is ascending w: w = v on a low tail, −v (exact) on a high one
        w = self.value(e, kk, g % self.d)
        np.negative(w, out=w, where=up[g])
        u = w.view(np.uint32)
        u = np.where(u >> 31, ~u, u | np.uint32(0x80000000)).astype(np.uint64)  # float order
        keys = (u << np.uint64(32)) | self.mass(kk, e).astype(np.uint64)
        bounds = np.searchsorted(g, np.arange(groups + 1))
        answer = np.full(groups, np.nan)
        low32 = np.uint64(0xFFFFFFFF)
        for group in np.flatnonzero(np.diff(bounds)):
            seg = np.sort(keys[bounds[group] : bounds[group + 1]])
            walked = base[group] + np.cumsum(seg & low32, dtype=np.int64)
            at = min(int(np.searchsorted(walked, goal[group], side="left")), len(seg) - 1)
            bits = np.uint32(seg[at] >> np.uint64(32))
            bits = bits & np.uint32(0x7FFFFFFF) if bits >> np.uint32(31) else ~bits
            answer[group] = float(np.array([bits], dtype=np.uint32).view(np.float32)[0])
        return np.where(up, -answer, answer)


def merge_quantiles(sketches: Sketches, qs: Sequence[float]) -> np.ndarray:
    """Quantiles [len(qs), D] (float64) of all steps of the sketched episodes.

    For q <= ½: the smallest knot value x whose merged mass(<= x) >= ⌈q·N⌉; for q > ½ the
    largest with mass(>= x) >= ⌈(1 − q)·N⌉ (symmetric); q = 0 and 1 give the exact min and max.
    A pure function of the sketches; `rank_error_bound` bounds its error.
    """
    e, d, k = sketches.knots.shape
    if k != sketches.grid.knots or len(sketches.counts) != e:
        raise SketchError(f"knots {sketches.knots.shape} do not fit {e} counts and grid {sketches.grid}")
    if any(not 0 <= q <= 1 for q in qs):
        raise ValueError(f"quantiles must lie in [0, 1], got {list(qs)}")
    out = np.empty((len(qs), d), dtype=np.float64)
    inside = [i for i, q in enumerate(qs) if 0 < q < 1]
    if inside:
        out[inside] = _Merge(sketches).quantiles([qs[i] for i in inside])
    for i, q in enumerate(qs):
        if q == 0:
            out[i] = sketches.knots[:, :, 0].min(axis=0)
        elif q == 1:
            out[i] = sketches.knots[:, :, -1].max(axis=0)
    return out


# -- episodes rows ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NormStats:
    """Statistics of one feature over every step of a selection, merged from its episodes rows.

    mean/std (population, ddof 0)/min/max and, when every row has a sketch, q01/q99: float64
    [D]. `exact` is False when some rows predate the float64 moments (then mean/std come from
    their float32 mean/std, as pooled before). `missing_sketches` counts rows without a
    sketch (written before sketches existed): then q01 and q99 are None and
    `require_quantiles()` says so.

    Example:
        >>> s = merge_episode_stats(episodes_rows, "action")
        >>> (x - s.mean) / s.std                  # or, openpi-style:
        >>> q01, q99 = s.require_quantiles(); 2 * (x - q01) / (q99 - q01) - 1
    """

    episodes: int
    count: int
    mean: np.ndarray
    std: np.ndarray
    min: np.ndarray
    max: np.ndarray
    q01: np.ndarray | None
    q99: np.ndarray | None
    exact: bool
    missing_sketches: int
    rank_error_bound: float | None  # worst-case rank error of q01/q99 (None without them)

    def require_quantiles(self) -> tuple[np.ndarray, np.ndarray]:
        """(q01, q99), or MissingSketchError naming how many episodes predate the sketches."""
        if self.q01 is None or self.q99 is None:
            raise MissingSketchError(
                f"{self.missing_sketches} of the {self.episodes} selected episodes were written before "
                "quantile sketches existed (their episodes rows have no sketch), so q01/q99 cannot be "
                "merged; normalize with mean/std, select newer episodes, or re-ingest these episodes"
            )
        return self.q01, self.q99


def _list_matrix(column: pa.ChunkedArray | pa.Array, dtype: type, what: str) -> np.ndarray:
    """[rows, width] from a list column without nulls whose lists all have one length."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    if column.null_count:
        raise ValueError(f"{what} has nulls")
    offsets = column.offsets.to_numpy()
    lengths = np.diff(offsets)
    if len(lengths) and (lengths != lengths[0]).any():
        raise ValueError(
            f"{what} vectors differ in length across episodes ({sorted(set(lengths.tolist()))}); "
            "select episodes of one robot type"
        )
    width = int(lengths[0]) if len(lengths) else 0
    flat = column.values.to_numpy(zero_copy_only=False)[offsets[0] : offsets[-1]]
    return np.ascontiguousarray(flat.astype(dtype, copy=False).reshape(len(lengths), width))


def _valid(table: pa.Table, name: str) -> np.ndarray:
    if name not in table.column_names:
        return np.zeros(table.num_rows, dtype=bool)
    return np.asarray(table.column(name).is_valid().to_numpy(zero_copy_only=False), dtype=bool)


def _filled(table: pa.Table, name: str, valid: np.ndarray, fallback: np.ndarray) -> np.ndarray:
    """The float64 matrix of list column `name` where valid, `fallback` elsewhere."""
    if valid.all():
        return _list_matrix(table.column(name), np.float64, name)
    out = fallback.copy()
    if valid.any():
        out[valid] = _list_matrix(table.column(name).filter(pa.array(valid)), np.float64, name)
    return out


NORM_STATS_KINDS = ("proprio", "action")


def merge_norm_stats(
    episodes: pa.Table, kinds: Sequence[str] = NORM_STATS_KINDS, *, quantiles: bool = True
) -> dict[str, NormStats]:
    """Merge the statistics of each feature in `kinds` over episodes rows (EPISODES_SCHEMA):
    `step_count` and `<kind>_mean/_std/_min/_max` are needed; `<kind>_mean64/_m2/_sketch` are
    used where present and not null (rows of older lakes fall back, see NormStats). Reads no
    step; the sketches of all kinds are merged in one pass (`quantiles=False`: moments only).

    Raises:
        ValueError: no rows, or rows of different dimensions.
        SketchError: sketches that do not decode or disagree with `step_count`.

    Example:
        >>> stats = merge_norm_stats(dataset_episodes_rows)
        >>> stats["action"].q99
    """
    if episodes.num_rows == 0:
        raise ValueError("no episodes rows to merge")
    counts = episodes.column("step_count").to_numpy(zero_copy_only=False).astype(np.int64)
    out: dict[str, NormStats] = {}
    sketched = []
    for kind in kinds:
        exact_rows = _valid(episodes, f"{kind}_mean64") & _valid(episodes, f"{kind}_m2")
        if exact_rows.all():
            means = _list_matrix(episodes.column(f"{kind}_mean64"), np.float64, f"{kind}_mean64")
            m2s = _list_matrix(episodes.column(f"{kind}_m2"), np.float64, f"{kind}_m2")
        else:  # rows older than the float64 moments: their float32 mean and std
            mean32 = _list_matrix(episodes.column(f"{kind}_mean"), np.float64, f"{kind}_mean")
            std32 = _list_matrix(episodes.column(f"{kind}_std"), np.float64, f"{kind}_std")
            means = _filled(episodes, f"{kind}_mean64", exact_rows, mean32)
            m2s = _filled(episodes, f"{kind}_m2", exact_rows, counts[:, None] * np.square(std32))
        total, mean, m2 = merge_moments(counts, means, m2s)
        missing = int((~_valid(episodes, f"{kind}_sketch")).sum())
        if quantiles and missing == 0:
            sketched.append(kind)
        out[kind] = NormStats(
            episodes=episodes.num_rows,
            count=total,
            mean=mean,
            std=np.sqrt(np.maximum(m2, 0.0) / total),
            min=_list_matrix(episodes.column(f"{kind}_min"), np.float64, f"{kind}_min").min(axis=0),
            max=_list_matrix(episodes.column(f"{kind}_max"), np.float64, f"{kind}_max").max(axis=0),
            q01=None,
            q99=None,
            exact=bool(exact_rows.all()),
            missing_sketches=missing,
            rank_error_bound=None,
        )
    if sketched:
        sk = decode_sketches(*(episodes.column(f"{kind}_sketch") for kind in sketched))
        if (sk.counts != counts).any():
            raise SketchError("sketch step counts disagree with step_count")
        dims = [out[kind].mean.shape[0] for kind in sketched]
        if sum(dims) != sk.knots.shape[1]:
            raise SketchError(f"sketches hold {sk.knots.shape[1]} dims, the rows {sum(dims)} ({sketched})")
        q01, q99 = merge_quantiles(sk, NORM_QUANTILES)
        bound = rank_error_bound(NORM_QUANTILES[0], len(counts), int(counts.sum()), sk.grid)
        at = 0
        for kind, d in zip(sketched, dims, strict=True):
            out[kind] = replace(out[kind], q01=q01[at : at + d], q99=q99[at : at + d], rank_error_bound=bound)
            at += d
    return out


def merge_episode_stats(episodes: pa.Table, kind: str, *, quantiles: bool = True) -> NormStats:
    """`merge_norm_stats` of one feature ("proprio" or "action")."""
    return merge_norm_stats(episodes, (kind,), quantiles=quantiles)[kind]
