"""The last step of a quantile merge (`_merge`): among the knots inside each bracket, the first
at which the merged mass reaches the goal.

Sorting every knot inside a bracket (~10,000 per quantile and dimension on the benchmark's
10,000 episodes) cost more than finding the brackets. Instead the knots are first counted into
`_BINS` cells per bracket by value (one vectorized pass over every bracket at once: a
monotone map of the value, so ties share a cell and every knot of an earlier cell is smaller
than every knot of a later one); the cell where the mass reaches the goal is the only one
sorted and walked, from the mass of the cells before it. The answer is the one a walk over all
of them gives (the same keys, in the same order, from the same mass): the cells only choose
which keys need sorting.
"""

from __future__ import annotations

import numpy as np

# Cells per bracket: ~150 knots each to sort on the benchmark, the cells' masses a small table.
_BINS = 64

_F32 = np.float32
_LOW32 = np.uint64(0xFFFFFFFF)


def order_bits(w: np.ndarray, shift: int = 0) -> np.ndarray:
    """uint64 of float32 `w` whose unsigned order is the floats' order (-0.0 taken as 0.0),
    shifted left by `shift` bits (in place: one uint64 array made)."""
    i = (w + _F32(0.0)).view(np.int32)
    flip = i >> np.int32(31)  # -1 where negative: flip the 31 value bits, giving signed order
    flip &= np.int32(0x7FFFFFFF)
    flip ^= i
    flip ^= np.int32(-0x80000000)  # signed order to unsigned order
    out = flip.view(np.uint32).astype(np.uint64)
    if shift:
        out <<= np.uint64(shift)
    return out


def from_order_bits(bits: int) -> float:
    """The float32 (as a float) whose `order_bits` are `bits`."""
    b = np.uint32(bits)
    b = b & np.uint32(0x7FFFFFFF) if b >> np.uint32(31) else ~b
    return float(np.array([b], dtype=np.uint32).view(np.float32)[0])


def walk_brackets(
    w: np.ndarray,
    mass: np.ndarray,
    group: np.ndarray,
    low: np.ndarray,
    high: np.ndarray,
    start: np.ndarray,
    goal: np.ndarray,
) -> np.ndarray:
    """Per group g of G: the value of the first knot, in ascending (value, mass) order, at which
    start[g] plus the masses walked reaches goal[g] (the last knot if none does; NaN for a group
    without knots), as float64 [G].

    w: float32 [C] the knots' values (negated on a high tail: always walked ascending); mass:
    uint64 [C] the steps each stands for; group: [C] its group, in any order; low, high: [G]
    the bracket (low < w <= high, either end possibly infinite; only the cells' spacing depends
    on them); start, goal: int64 [G].
    """
    groups = len(start)
    answer = np.full(groups, np.nan)
    if not len(w):
        return answer
    x = w.astype(np.float64)
    left = np.where(np.isfinite(low), low, x.min())
    width = np.where(np.isfinite(high), high, x.max()) - left
    scale = np.divide(_BINS, width, out=np.zeros(groups), where=width > 0)
    # cell = floor((x - left) · scale), clipped: each step is monotone in x (rounding included)
    x -= left.take(group)
    x *= scale.take(group)
    np.clip(x, 0, _BINS - 1, out=x)
    cell = x.astype(np.intp)
    cell += group * _BINS
    cells = groups * _BINS
    per_cell = np.bincount(cell, weights=mass, minlength=cells).reshape(groups, _BINS)
    filled = np.bincount(cell, minlength=cells).reshape(groups, _BINS) > 0
    # masses are integers below 2**53: their float64 sums are exact
    reached = np.cumsum(per_cell, axis=1)
    reached += start[:, None]
    target = np.count_nonzero(reached < goal[:, None], axis=1)
    last = _BINS - 1 - np.argmax(filled[:, ::-1], axis=1)  # where a walk that never reaches ends
    np.minimum(target, last, out=target)
    rows = np.arange(groups)
    before = np.where(target > 0, reached[rows, np.maximum(target - 1, 0)], start).astype(np.int64)
    chosen = np.flatnonzero(cell == (target + rows * _BINS).take(group))
    order = np.argsort(group.take(chosen), kind="stable")
    chosen = chosen.take(order)
    bounds = np.zeros(groups + 1, np.int64)
    np.cumsum(np.bincount(group.take(chosen), minlength=groups), out=bounds[1:])
    keys = order_bits(w.take(chosen), 32)
    keys |= mass.take(chosen)
    for g in np.flatnonzero(np.diff(bounds)):
        seg = np.sort(keys[bounds[g] : bounds[g + 1]])
        walked = before[g] + np.cumsum(seg & _LOW32, dtype=np.int64)
        i = min(int(np.searchsorted(walked, goal[g], side="left")), len(seg) - 1)
        answer[g] = from_order_bits(int(seg[i] >> np.uint64(32)))
    return answer
