"""Merging per-episode statistics: exact moments (`merge_moments`) and quantiles of the merged
step function of every episode's sketch (`merge_quantiles`).

A quantile is found in one exact pass per tail, vectorized over every (quantile, dimension):

1. a *model* — the mass-weighted CDF of a few thousand random knots — brackets each answer
   between two of its values, a few standard errors either side of its estimate;
2. an exact pass counts, in every episode that reaches into the bracket (its first knot is at
   most the bracket's top: near a tail, few episodes do), the knots below each end (a
   dimension's K knots are sorted and contiguous: one row per episode), giving the exact merged
   mass below both ends; a bracket that does not hold the answer is widened to ±inf on the side
   it missed and passed over once more;
3. the knots inside each bracket are counted into cells by value (`_walk`: one pass over every
   bracket at once); only the cell where the mass reaches the goal is packed as 64-bit keys
   (order-preserving value bits, then the knot's mass), sorted and walked, from the mass of the
   cells before it. A bracket holding a single float (ties: a gripper at exactly 0) is its own
   answer.

The knots' masses (`cumulative_masses`) and the edges are made on one core while the model is
made on the other, then the two tails run on the two cores.

The model only chooses how much work a merge does, never its result: the answer is the same
pure function of the knots whatever the model (tests run it with a useless one).
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from pi_format.stats._bytes import Sketches
from pi_format.stats._errors import SketchError
from pi_format.stats._grid import cumulative_masses, knot_masses
from pi_format.stats._walk import order_bits, walk_brackets

NORM_QUANTILES = (0.01, 0.99)

# Random knots whose mass-weighted CDF brackets each quantile (work, not result: see above).
_MODEL_KNOTS = 4096
# The bracket's half-width, in standard errors of the model's CDF at the quantile: wide enough
# that a second pass is rare, narrow enough that few knots lie inside.
_Z = 4.0
# Knots compared first from the tail side of each row (rows with more there get a second,
# whole-row pass): near a tail few rows reach further.
_HEAD = 12
_THREADS = True


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
        out[inside] = _Merge(sketches).quantiles(np.array([qs[i] for i in inside], dtype=np.float64))
    for i, q in enumerate(qs):
        if q == 0:
            out[i] = sketches.knots[:, :, 0].min(axis=0)
        elif q == 1:
            out[i] = sketches.knots[:, :, -1].max(axis=0)
    return out


_F32 = np.float32
_LOW32 = np.uint64(0xFFFFFFFF)


class _Merge:
    """One merge of E sketches ([E, D, K] knots, each (episode, dimension) row sorted)."""

    def __init__(self, sketches: Sketches) -> None:
        self.knots = np.ascontiguousarray(sketches.knots, dtype=np.float32)
        self.e, self.d, self.k = self.knots.shape
        self.rows = self.knots.reshape(self.e * self.d, self.k)
        self.counts = sketches.counts.astype(np.int64)
        self.total = int(self.counts.sum())
        self.grid = sketches.grid
        self.cum = self.mass = np.empty(0, np.uint64)  # `masses` fills them
        self._edges: dict[int, np.ndarray] = {}

    def masses(self) -> None:
        """The steps the knots stand for: `cum` [E * (K + 1)] int64, each episode's cumulative
        masses (`cumulative_masses`), and `mass` [E * K] uint64, each knot's; then the edges."""
        cum = cumulative_masses(self.counts, self.grid)  # [E, K + 1]
        self.cum = cum.ravel()
        self.mass = np.diff(cum, axis=1).view(np.uint64).ravel()  # steps per knot (>= 0)
        self.edge(False)  # the edges, made once before the tails share them

    def edge(self, from_top: bool, j: int = 0) -> np.ndarray:
        """[D, E]: knot j from the tail side of every episode (j = 0: its min, or its max)."""
        k = self.k - 1 - j if from_top else j
        if k not in self._edges:  # the four used, in one pass over the knots
            wanted = sorted({k, 0, self.k - 1, min(_HEAD, self.k) - 1, self.k - min(_HEAD, self.k)})
            got = np.ascontiguousarray(self.knots.take(wanted, axis=2).transpose(2, 1, 0))
            self._edges.update(zip(wanted, got, strict=True))
        return self._edges[k]

    @staticmethod
    def count(passing: np.ndarray) -> np.ndarray:
        """[A] int64: the leading Trues of each row of a bool [A, J] (argmax stops at the
        first False)."""
        first = np.argmin(passing, axis=1)
        first[passing[:, -1]] = passing.shape[1]
        return first

    def model(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """A bracket [lo, hi] ([Q, D] float32 each) around each quantile from the mass-weighted
        CDF of random knots, _Z of its standard errors either side of q."""
        rng = np.random.default_rng(0)
        size = min(_MODEL_KNOTS, self.k * self.e)
        kk = rng.integers(0, self.k, size=size)
        ee = rng.integers(0, self.e, size=size)
        s = np.ascontiguousarray(self.knots[ee, :, kk].T)  # [D, s]
        # the sample's masses from its own episodes' (`masses` may still be running)
        m = knot_masses(self.counts.take(ee), kk, self.grid).astype(np.float64)
        # sorted as 64-bit keys (value order bits, then the sample's index): no argsort
        keys = order_bits(s, 32)
        keys |= np.arange(size, dtype=np.uint64)
        keys.sort(axis=1)
        order = (keys & _LOW32).astype(np.intp)
        vals = np.take_along_axis(s, order, axis=1)
        w = m.take(order)
        msum = max(float(m.sum()), 1.0)  # knots of 1-step episodes beyond the first weigh 0
        cdf = np.cumsum(w, axis=1) / msum
        # standard error of a ratio estimate of a proportion p from weights w: sqrt(Σw²(1−p)²
        # below + Σw²p² above) / Σw
        w2 = np.cumsum(np.square(w), axis=1)
        err = np.sqrt(w2 * np.square(1 - cdf) + (w2[:, -1:] - w2) * np.square(cdf)) / msum
        rows = np.arange(self.d)

        def at(level: np.ndarray) -> np.ndarray:  # [Q, D] index of the model's value at a level
            got = np.stack([np.count_nonzero(cdf < lv[:, None], axis=1) for lv in level])
            return np.minimum(got, size - 1)

        spread = _Z * err[rows[None, :], at(np.repeat(q[:, None], self.d, 1))] + 1.0 / size
        lo = vals[rows[None, :], at(q[:, None] - spread)]
        hi = vals[rows[None, :], at(q[:, None] + spread)]
        return lo, hi

    def quantiles(self, q: np.ndarray) -> np.ndarray:
        """[Q, D] for 0 < q < 1 (see `merge_quantiles`)."""
        up = q > 0.5
        goal = np.ceil(np.where(up, (1.0 - q) * self.total, q * self.total)).astype(np.int64)
        pool = ThreadPoolExecutor(2) if _THREADS else None
        try:
            return self._quantiles(q, up, goal, pool)
        finally:
            if pool is not None:
                pool.shutdown()

    def _quantiles(
        self, q: np.ndarray, up: np.ndarray, goal: np.ndarray, pool: ThreadPoolExecutor | None
    ) -> np.ndarray:
        # the knots' masses and the edges on one core while the model is made on the other
        masses = pool.submit(self.masses) if pool is not None else None
        if masses is None:
            self.masses()
        lo, hi = self.model(q)
        # the tail-side end is open: (lo, hi] on a low tail, [lo, hi) on a high one; the model's
        # value there is moved one float out so that it belongs to the bracket
        lo = np.where(up[:, None], lo, np.nextafter(lo, _F32(-np.inf)))
        hi = np.where(up[:, None], np.nextafter(hi, _F32(np.inf)), hi)
        answer = np.full(lo.shape, np.nan)
        if masses is not None:
            masses.result()

        def tail(from_top: bool) -> None:  # one tail's quantiles, into `answer`
            qi, di = np.nonzero(np.broadcast_to(up[:, None] == from_top, lo.shape))
            t_lo, t_hi, t_goal = lo[qi, di], hi[qi, di], goal[qi]
            # brackets of one float first: ties, settled cheaply
            found = self.tie(di, t_lo, t_hi, t_goal, from_top)
            for _ in range(2):  # a bracket missing its answer is widened once, to ±inf on that side
                unsolved = np.flatnonzero(np.isnan(found))
                if not len(unsolved):
                    break
                found[unsolved], t_lo[unsolved], t_hi[unsolved] = self.solve(
                    qi[unsolved], di[unsolved], t_lo[unsolved], t_hi[unsolved], t_goal[unsolved], from_top
                )
            answer[qi, di] = found

        tails = [top for top in (False, True) if (up == top).any()]
        if pool is not None and len(tails) == 2:  # the two tails on two cores (numpy releases the GIL)
            list(pool.map(tail, tails))
        else:
            for top in tails:
                tail(top)
        if np.isnan(answer).any():  # unreachable: ±inf brackets hold every answer
            raise AssertionError("a quantile bracket held no answer")
        return answer

    def passing(self, r: np.ndarray, x: np.ndarray, from_top: bool) -> np.ndarray:
        """bool [A, J]: knot j from the tail side of each row (ascending on a low tail,
        descending on a high one) is <= x (low) or >= x (high): a run of Trues, then Falses."""
        return np.greater_equal(r[:, ::-1], x) if from_top else np.less_equal(r, x)

    def tie(
        self, di: np.ndarray, lo: np.ndarray, hi: np.ndarray, goal: np.ndarray, from_top: bool
    ) -> np.ndarray:
        """The answer of each bracket that holds one float (a value many steps share: a gripper
        at exactly 0) where a cheap test proves it, else NaN: the exact mass on the tail side
        of the tail-side end is below the goal (few rows reach past it) and a lower bound of
        the mass up to the float — whole episodes' first _HEAD knots, where their knot _HEAD − 1
        is no further — reaches it."""
        near, far = (hi, lo) if from_top else (lo, hi)
        answer = np.full(len(di), np.nan)
        test = np.flatnonzero(np.nextafter(near, far) == far)
        if not len(test):
            return answer
        groups, j = len(test), min(_HEAD, self.k) - 1
        beyond = np.greater_equal if from_top else np.less_equal  # on the tail side of x
        gg, ee = np.nonzero(beyond(self.edge(from_top, j)[di[test]], far[test, None]))
        at_least = self.merged(gg, ee, np.full(len(gg), j + 1), groups, from_top)
        gg, ee = np.nonzero(beyond(self.edge(from_top)[di[test]], near[test, None]))
        r = np.take(self.rows, ee * self.d + di[test][gg], axis=0)
        start = self.merged(
            gg, ee, self.count(self.passing(r, near[test][gg, None], from_top)), groups, from_top
        )
        proven = (start < goal[test]) & (at_least >= goal[test])
        answer[test[proven]] = far[test[proven]]
        return answer

    def solve(
        self, qi: np.ndarray, di: np.ndarray, lo: np.ndarray, hi: np.ndarray, goal: np.ndarray, from_top: bool
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One exact pass for groups g = (quantile qi[g], dimension di[g]) of one tail: the answer
        where the bracket holds it (NaN elsewhere), and the brackets widened where it did not."""
        groups = len(qi)
        # the tail-side end of each bracket (walked from) and the inner one
        near, far = (hi, lo) if from_top else (lo, hi)
        # the rows (episode, dimension) that reach past the inner end: the others hold no knot
        # on the tail side of the bracket and add nothing to the masses walked
        if from_top:
            gg, ee = np.nonzero(self.edge(True)[di] >= far[:, None])
        else:
            gg, ee = np.nonzero(self.edge(False)[di] <= far[:, None])
        r = np.take(self.rows, ee * self.d + di[gg], axis=0)  # [A, K], group-major
        # knots on the tail side of each end, counted among the first _HEAD from the tail side;
        # rows they fill are counted whole where the count matters
        head = r[:, -_HEAD:] if from_top else r[:, :_HEAD]
        a, b = self.passing(head, near[gg, None], from_top), self.passing(head, far[gg, None], from_top)
        na, nb = self.count(a), self.count(b)
        full_a = np.flatnonzero(a[:, -1])
        if len(full_a):
            na[full_a] = self.count(
                self.passing(np.take(r, full_a, axis=0), near[gg[full_a], None], from_top)
            )
        start = self.merged(gg, ee, na, groups, from_top)  # exact mass on the tail side of `near`
        at_least = self.merged(gg, ee, nb, groups, from_top)  # of `far`, or less (capped rows)
        beyond = start >= goal  # the answer lies past the tail-side end
        # a bracket holding one float (ties: a gripper at exactly 0) is its own answer
        one = ~beyond & (at_least >= goal) & (np.nextafter(near, far) == far)
        unsolved = ~beyond & ~one
        full_b = np.flatnonzero(b[:, -1] & unsolved[gg])
        b_full = r_full = None
        if len(full_b):
            r_full = np.take(r, full_b, axis=0)
            b_full = self.passing(r_full, far[gg[full_b], None], from_top)
            nb[full_b] = self.count(b_full)
        end = self.merged(gg, ee, nb, groups, from_top)
        short = unsolved & (end < goal)  # past the inner end
        answer = np.full(groups, np.nan)
        answer[one] = far[one]
        new_near, new_far = near.copy(), far.copy()
        outward = np.inf if from_top else -np.inf
        new_far[beyond], new_near[beyond] = near[beyond], outward
        new_near[short], new_far[short] = far[short], -outward
        walk = unsolved & ~short
        if walk.any():
            # the knots inside a bracket: on the tail side of its inner end, not of the other
            w, m, g = self.candidates(r, gg, ee, a ^ b, walk, from_top, skip=full_b)
            if b_full is not None and r_full is not None:
                a_full = self.passing(r_full, near[gg[full_b], None], from_top)
                w2, m2, g2 = self.candidates(r_full, gg[full_b], ee[full_b], a_full ^ b_full, walk, from_top)
                w, m, g = np.concatenate((w, w2)), np.concatenate((m, m2)), np.concatenate((g, g2))
            # walked ascending: near < w <= far on a low tail, and negated on a high one
            low, high = (-near, -far) if from_top else (near, far)
            found = walk_brackets(w, m, g, low.astype(np.float64), high.astype(np.float64), start, goal)
            answer[walk] = (-found if from_top else found)[walk]
        new_lo, new_hi = (new_far, new_near) if from_top else (new_near, new_far)
        return answer, new_lo, new_hi

    def merged(
        self, gg: np.ndarray, ee: np.ndarray, n: np.ndarray, groups: int, from_top: bool
    ) -> np.ndarray:
        """[groups] int64: the merged mass of the first n knots from the tail side of each row."""
        base = ee * (self.k + 1)
        if from_top:  # the top n knots: n_e − the steps of the others
            return np.bincount(
                gg, weights=self.counts.take(ee) - self.cum.take(base + self.k - n), minlength=groups
            ).astype(np.int64)
        return np.bincount(gg, weights=self.cum.take(base + n), minlength=groups).astype(np.int64)

    def candidates(
        self,
        r: np.ndarray,
        gg: np.ndarray,
        ee: np.ndarray,
        inside: np.ndarray,
        walk: np.ndarray,
        from_top: bool,
        skip: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The knots marked `inside` [A, J] (J knots from the tail side of each row of r) in
        groups to walk, rows in `skip` left out: their values walked ascending (negated on a
        high tail), masses and groups (`walk_brackets`' w, mass, group)."""
        inside &= walk[gg, None]
        if skip is not None and len(skip):
            inside[skip] = False
        at = np.flatnonzero(inside)
        rows, kk = np.divmod(at, inside.shape[1])  # (np.nonzero of the 2-D mask costs ~2x more)
        if from_top:  # knot j from the top is knot K - 1 - j
            np.subtract(self.k - 1, kk, out=kk)
        at = rows * self.k  # flat index in r, then in the masses: 1-D takes
        at += kk
        w = r.reshape(-1).take(at)
        if from_top:  # descending values are ascending negated ones (exact)
            np.negative(w, out=w)
        np.multiply(ee.take(rows), self.k, out=at)
        at += kk
        return w, self.mass.take(at), gg.take(rows)
