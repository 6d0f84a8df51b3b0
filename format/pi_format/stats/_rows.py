"""Statistics of a selection from its `episodes` rows (EPISODES_SCHEMA): the exact moments
and, from the sketches, q01/q99, for every feature at once (`merge_norm_stats`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa

from pi_format.stats._bytes import decode_sketches
from pi_format.stats._errors import MissingSketchError, SketchError
from pi_format.stats._grid import rank_error_bound
from pi_format.stats._merge import NORM_QUANTILES, merge_moments, merge_quantiles


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
        if (self.q01 is None or self.q99 is None) and self.missing_sketches == 0:
            raise MissingSketchError(
                f"these statistics of {self.episodes} episodes carry no q01/q99 although no episode "
                "lacks a sketch: they were merged without quantiles (merge_norm_stats(..., "
                "quantiles=False)); merge them with quantiles=True, or normalize with mean/std"
            )
        if self.q01 is None or self.q99 is None:
            raise MissingSketchError(
                f"{self.missing_sketches} of the {self.episodes} selected episodes were written before "
                "quantile sketches existed (their episodes rows have no sketch), so q01/q99 cannot be "
                "merged; normalize with mean/std, select newer episodes, or re-ingest these episodes"
            )
        return self.q01, self.q99


def _list_matrix(column: pa.ChunkedArray | pa.Array, dtype: type | None, what: str) -> np.ndarray:
    """[rows, width] from a list column without nulls whose lists all have one length (`dtype`
    None: as stored)."""
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
    if dtype is not None:
        flat = flat.astype(dtype, copy=False)
    return np.ascontiguousarray(flat.reshape(len(lengths), width))


def _valid(table: pa.Table, name: str) -> np.ndarray:
    if name not in table.column_names:
        return np.zeros(table.num_rows, dtype=bool)
    if table.column(name).null_count == 0:  # cached per chunk: no pass over the rows
        return np.ones(table.num_rows, dtype=bool)
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
    missing = {kind: int((~_valid(episodes, f"{kind}_sketch")).sum()) for kind in kinds}
    sketched = [kind for kind in kinds if quantiles and missing[kind] == 0]
    out = _moments(episodes, kinds, counts, missing)
    if not sketched:
        return out
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


def _moments(
    episodes: pa.Table, kinds: Sequence[str], counts: np.ndarray, missing: dict[str, int]
) -> dict[str, NormStats]:
    """The NormStats of each kind without q01/q99."""
    out: dict[str, NormStats] = {}
    exact = {kind: _valid(episodes, f"{kind}_mean64") & _valid(episodes, f"{kind}_m2") for kind in kinds}
    # the list columns read, each made one chunk in one call (rows arrive as one chunk per row
    # group: joining them column by column costs more)
    names = []
    for kind in kinds:
        moments = ("mean64", "m2") if exact[kind].all() else ("mean", "std", "mean64", "m2")
        names += [f"{kind}_{name}" for name in (*moments, "min", "max")]
    lists = episodes.select([n for n in dict.fromkeys(names) if n in episodes.column_names]).combine_chunks()
    for kind in kinds:
        exact_rows = exact[kind]
        if exact_rows.all():
            means = _list_matrix(lists.column(f"{kind}_mean64"), np.float64, f"{kind}_mean64")
            m2s = _list_matrix(lists.column(f"{kind}_m2"), np.float64, f"{kind}_m2")
        else:  # rows older than the float64 moments: their float32 mean and std
            mean32 = _list_matrix(lists.column(f"{kind}_mean"), np.float64, f"{kind}_mean")
            std32 = _list_matrix(lists.column(f"{kind}_std"), np.float64, f"{kind}_std")
            means = _filled(lists, f"{kind}_mean64", exact_rows, mean32)
            m2s = _filled(lists, f"{kind}_m2", exact_rows, counts[:, None] * np.square(std32))
        total, mean, m2 = merge_moments(counts, means, m2s)
        out[kind] = NormStats(
            episodes=episodes.num_rows,
            count=total,
            mean=mean,
            std=np.sqrt(np.maximum(m2, 0.0) / total),
            # min/max as stored (float32), then widened: the same values, a smaller pass
            min=_list_matrix(lists.column(f"{kind}_min"), None, f"{kind}_min").min(axis=0).astype(np.float64),
            max=_list_matrix(lists.column(f"{kind}_max"), None, f"{kind}_max").max(axis=0).astype(np.float64),
            q01=None,
            q99=None,
            exact=bool(exact_rows.all()),
            missing_sketches=missing[kind],
            rank_error_bound=None,
        )
    return out


def merge_episode_stats(episodes: pa.Table, kind: str, *, quantiles: bool = True) -> NormStats:
    """`merge_norm_stats` of one feature ("proprio" or "action")."""
    return merge_norm_stats(episodes, (kind,), quantiles=quantiles)[kind]
