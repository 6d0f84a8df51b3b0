"""Quantiles of a weighted mixture of sketched selections (`merge_weighted_quantiles`): what a
`pi_loader.Mixture` normalizes with, each selection contributing in proportion to its weight,
not its size.

The mixture's step function is G(x) = Σ w_i F̂_i(x) / N_i: F̂_i is selection i's merged step
function of its episodes' knots (`merge_quantiles`), N_i its steps, w the weights normalised to
sum 1. Every knot of selection i keeps the steps it stands for, scaled by w_i / N_i, and a
quantile is read off the cumulative masses exactly as in `merge_quantiles` (for q <= ½ the
smallest knot value x with G(<= x) >= q, mirrored above ½). `mixture_rank_error_bound` bounds its
error for any data, as `rank_error_bound` does for one selection.

Work: each selection's own quantiles bracket the mixture's (G(x) < q below the smallest of them,
G(x) >= q at the largest), so only the knots on the tail side of that bracket are sorted: near a
tail, a few percent of them. Selections of other widths: dimension d merges over the selections
that have it (weights renormalised over them), as the mixture's moments do.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pi_format.stats._bytes import Sketches
from pi_format.stats._errors import SketchError
from pi_format.stats._grid import cumulative_masses
from pi_format.stats._merge import merge_quantiles

# Masses are float64 sums of w_i · m / N_i: the goal is lowered by this much so that rounding in
# the running sum never steps past a knot whose exact mass reaches it (far below any rank error).
_SLACK = 1e-12


def merge_weighted_quantiles(
    groups: Sequence[Sketches], weights: Sequence[float] | np.ndarray, qs: Sequence[float]
) -> np.ndarray:
    """Quantiles [len(qs), max D] (float64) of the mixture of `groups` (each a selection's decoded
    sketches, `decode_sketches`) where group i has total weight `weights[i]` (see the module
    docstring); q = 0 and 1 give the exact min and max of the groups that have the dimension.
    A pure function of the sketches and weights; `mixture_rank_error_bound` bounds its error.

    Raises:
        ValueError: no groups, a weight per group missing, a weight not finite and > 0, or a q
            outside [0, 1].
        SketchError: groups of different sketch grids.

    Example:
        >>> a = decode_sketches([encode_sketch(np.arange(100.0)[:, None])])
        >>> b = decode_sketches([encode_sketch(np.full((10_000, 1), 1e3))])
        >>> merge_weighted_quantiles([a, b], [0.5, 0.5], [0.01, 0.99])[:, 0].tolist()   # not b's size
        [1.0, 1000.0]
    """
    if not groups or len(groups) != len(weights):
        raise ValueError(f"need one weight per group, got {len(weights)} weights for {len(groups)} groups")
    w = np.asarray(weights, dtype=np.float64)
    if not (np.isfinite(w).all() and (w > 0).all()):
        raise ValueError(f"weights must be finite and > 0, got {w.tolist()}")
    if any(not 0 <= q <= 1 for q in qs):
        raise ValueError(f"quantiles must lie in [0, 1], got {list(qs)}")
    if len({g.grid for g in groups}) != 1:
        raise SketchError(
            f"sketches of different grids do not merge: {sorted({g.grid.grid_id for g in groups})}"
        )
    dims = [int(g.knots.shape[1]) for g in groups]
    own = [merge_quantiles(g, qs) for g in groups]  # [Q, D_i]: the brackets (and q = 0, 1)
    # each knot's share of its group: the steps it stands for over the group's steps
    share = [np.diff(cumulative_masses(g.counts, g.grid), axis=1) / float(g.counts.sum()) for g in groups]
    out = np.empty((len(qs), max(dims)), dtype=np.float64)
    for d in range(max(dims)):
        members = [i for i, n in enumerate(dims) if n > d]
        mine = w[members] / w[members].sum()
        for j, q in enumerate(qs):
            edges = np.array([own[i][j, d] for i in members])
            if q in (0.0, 1.0):  # merge_quantiles' exact min / max of each group
                out[j, d] = edges.min() if q == 0 else edges.max()
                continue
            low = q <= 0.5
            # on the tail side of the farthest group's quantile lies every candidate: G reaches q there
            edge = edges.max() if low else edges.min()
            values, masses = [], []
            for i, weight in zip(members, mine, strict=True):
                knots = groups[i].knots[:, d, :]
                inside = knots <= edge if low else knots >= edge
                values.append(knots[inside])
                masses.append(share[i][inside] * weight)
            v, m = np.concatenate(values), np.concatenate(masses)
            order = np.argsort(v if low else -v, kind="stable")
            cum = np.cumsum(m[order])
            at = int(np.searchsorted(cum, (q if low else 1.0 - q) - _SLACK, side="left"))
            out[j, d] = float(v[order[min(at, len(order) - 1)]])
    return out
