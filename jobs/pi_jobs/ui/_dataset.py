"""The Dataset page: statistics of a selection — a pin, a SQL query or the Episodes page's
filters — without reading a step.

The episode-length histogram and the success rates by robot and by task come from each
selected episode's row (the catalog's for a query or filters, the lake's pinned rows for a
pin: small columns only). The per-dimension distributions are merged from the quantile
sketches and exact moments every episodes row carries (pi_format.stats: written at ingest,
SPEC.md §7.2): no step is read. A sketch row is ~2 kB per feature, so past `SKETCH_SAMPLE`
episodes the distributions merge the sketches of a sample — `SAMPLE_RUNS` runs of consecutive
episode ids spread evenly over the selection (a compacted lake's files are sorted by episode id,
so a run is read from one or two row groups, where a scattered sample would read them all) —
and the page says how many episodes they stand for.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pi_format import LakeLayout

from pi_jobs.ui import _page_cache
from pi_jobs.ui._errors import NotFound
from pi_jobs.ui._names import DimensionNames

# 2,000 episodes in 4 runs: their sketches and moments are read from ~4-8 row groups and merged
# in ~0.5 s at 100,000 episodes (4,000 in 8 runs took 0.6-1.5 s: benchmarks/ui/browse.py); a
# quantile merged from 2,000 episodes of ~100 steps is within the sketch's bound
# (pi_format.stats.rank_error_bound), far below what a chart shows.
SKETCH_SAMPLE = 2_000
SAMPLE_RUNS = 4
# the quantiles drawn per dimension (a box from q10 to q90, whiskers at q01 and q99)
QUANTILES = (0.01, 0.1, 0.5, 0.9, 0.99)
HISTOGRAM_BINS = 30
# most robots / tasks listed in the success tables (the largest first)
MAX_GROUPS = 50
ROW_COLUMNS = ["episode_id", "robot_id", "robot_type", "task", "success", "step_count"]
_STATS = ["step_count", "robot_type", "proprio_dim", "action_dim"]
_KINDS = ("proprio", "action")


@dataclass(frozen=True, slots=True)
class Distribution:
    """One feature's per-dimension statistics over the sketched episodes."""

    kind: str
    names: tuple[str, ...]
    quantiles: dict[str, list[float]]  # "q01" .. "q99" -> per dimension
    mean: list[float]
    std: list[float]
    min: list[float]
    max: list[float]


@dataclass(frozen=True, slots=True)
class DatasetStats:
    """What the Dataset page shows of one selection."""

    title: str
    episodes: int
    histogram: dict[str, list[float]]  # "edges" (HISTOGRAM_BINS + 1), "counts"
    by_robot: tuple[tuple[str, int, int], ...]  # (robot, episodes, successes), largest first
    by_task: tuple[tuple[str, int, int], ...]
    successes: int
    distributions: tuple[Distribution, ...]
    sketched: int  # episodes whose sketches were merged
    robot_type: str  # the robot type the distributions are of ("" when none)
    note: str  # what the distributions stand for

    def chart(self) -> dict[str, Any]:
        """The JSON the page's charts draw."""
        return {
            "histogram": self.histogram,
            "distributions": {
                d.kind: {"names": list(d.names), **d.quantiles, "mean": d.mean} for d in self.distributions
            },
        }


def _groups(rows: pa.Table, column: str) -> tuple[tuple[str, int, int], ...]:
    if rows.num_rows == 0:
        return ()
    counts = rows.group_by(column).aggregate([("success", "count"), ("success", "sum")]).to_pylist()
    ordered = sorted(counts, key=lambda r: (-r["success_count"], str(r[column])))[:MAX_GROUPS]
    return tuple((str(r[column]), int(r["success_count"]), int(r["success_sum"] or 0)) for r in ordered)


def _bins(lo: int, hi: int) -> int:
    """The width of HISTOGRAM_BINS whole-step bins from `lo` covering `hi`."""
    return max(1, -(-(hi - lo + 1) // HISTOGRAM_BINS))


def _histogram(lo: int, width: int, bins: dict[int, int]) -> dict[str, list[float]]:
    if not bins:
        return {"edges": [], "counts": []}
    n = max(bins) + 1
    return {
        "edges": [float(lo + width * i) for i in range(n + 1)],
        "counts": [float(bins.get(i, 0)) for i in range(n)],
    }


def _arrow_histogram(steps: np.ndarray) -> dict[str, list[float]]:
    if len(steps) == 0:
        return _histogram(0, 1, {})
    lo, hi = int(steps.min()), int(steps.max())
    width = _bins(lo, hi)
    counts = np.bincount((steps - lo) // width)
    return _histogram(lo, width, {i: int(c) for i, c in enumerate(counts) if c})


def sample_ids(ids: pa.Array, limit: int = SKETCH_SAMPLE, runs: int = SAMPLE_RUNS) -> pa.Array:
    """`ids` sorted, or at most `limit` of them: `runs` runs of consecutive ids spread evenly.

    Example:
        >>> sample_ids(pa.array([f"e{i:03d}" for i in range(100)]), limit=4, runs=2).to_pylist()
        ['e000', 'e001', 'e050', 'e051']
    """
    ordered = pc.take(ids, pc.sort_indices(ids))
    n = len(ordered)
    if n <= limit:
        return ordered
    run = max(limit // runs, 1)
    starts = [(n * k) // runs for k in range(runs)]
    return pa.concat_arrays([ordered.slice(s, run) for s in starts])


def _sketch_rows(layout: LakeLayout, ids: pa.Array, keep: Callable[[pa.Table], pa.Table]) -> pa.Table:
    """The episodes rows of `ids` with their statistics columns, narrowed by `keep`."""
    from deltalake import DeltaTable
    from pi_format.lake import NORM_STATS_COLUMNS
    from pi_format.lake.visibility import COMMIT_COLUMNS

    dataset = DeltaTable(layout.episodes).to_pyarrow_dataset()
    wanted = pc.field("episode_id").isin(ids)
    # the float32 mean/std only where a row predates the float64 moments (merge_norm_stats
    # falls back to them): a third of the bytes read otherwise
    stats = [f"{k}_{s}" for k in _KINDS for s in ("min", "max")]
    columns = list(dict.fromkeys([*COMMIT_COLUMNS, *_STATS, *stats, *NORM_STATS_COLUMNS]))
    rows = dataset.to_table(columns=[c for c in columns if c in dataset.schema.names], filter=wanted)
    exact = [f"{k}_{s}" for k in _KINDS for s in ("mean64", "m2")]
    if any(c not in rows.column_names or rows.column(c).null_count for c in exact):
        columns += [f"{k}_{s}" for k in _KINDS for s in ("mean", "std")]
        rows = dataset.to_table(columns=[c for c in columns if c in dataset.schema.names], filter=wanted)
    return keep(rows)


def _distributions(rows: pa.Table, names: DimensionNames) -> tuple[tuple[Distribution, ...], str, int]:
    """The distributions of the most common (robot type, dims) among `rows` (merging needs one
    dimensionality), its robot type, and how many rows were merged."""
    from pi_format.stats import decode_sketches, merge_norm_stats, merge_quantiles

    if rows.num_rows == 0:
        return (), "", 0
    shapes = rows.group_by(["robot_type", "proprio_dim", "action_dim"]).aggregate([("step_count", "count")])
    top = max(shapes.to_pylist(), key=lambda r: (r["step_count_count"], str(r["robot_type"])))
    mine = rows.filter(
        pc.and_(
            pc.and_(
                pc.equal(rows.column("robot_type"), top["robot_type"]),
                pc.equal(rows.column("proprio_dim"), top["proprio_dim"]),
            ),
            pc.equal(rows.column("action_dim"), top["action_dim"]),
        )
    )
    moments = merge_norm_stats(mine, _KINDS, quantiles=False)
    dims = [len(moments[kind].mean) for kind in _KINDS]
    sketches = [mine.column(f"{kind}_sketch") for kind in _KINDS if f"{kind}_sketch" in mine.column_names]
    merged = None
    if len(sketches) == len(_KINDS) and all(c.null_count == 0 for c in sketches) and all(dims):
        # both features' sketches decoded into one array and merged in one pass
        merged = merge_quantiles(decode_sketches(*sketches), QUANTILES)
    out, at = [], 0
    for kind, d in zip(_KINDS, dims, strict=True):
        m = moments[kind]
        quantiles: dict[str, list[float]] = {}
        if merged is not None:
            quantiles = {
                f"q{round(q * 100):02d}": merged[i, at : at + d].tolist() for i, q in enumerate(QUANTILES)
            }
        at += d
        out.append(
            Distribution(
                kind=kind,
                names=names.names(str(top["robot_type"]), kind, d),
                quantiles=quantiles,
                mean=m.mean.tolist(),
                std=m.std.tolist(),
                min=m.min.tolist(),
                max=m.max.tolist(),
            )
        )
    return tuple(out), str(top["robot_type"]), mine.num_rows


@dataclass(frozen=True, slots=True)
class Tally:
    """What a selection's rows give: counts, the length histogram, success by robot and task,
    and the ids whose sketches are merged (`sample_ids`)."""

    episodes: int
    successes: int
    histogram: dict[str, list[float]]
    by_robot: tuple[tuple[str, int, int], ...]
    by_task: tuple[tuple[str, int, int], ...]
    sample: pa.Array


def tally_rows(rows: pa.Table) -> Tally:
    """The Tally of a selection's rows (ROW_COLUMNS), counted by Arrow (a pin's rows)."""
    steps = rows.column("step_count").to_numpy(zero_copy_only=False).astype(np.int64)
    successes = int(pc.sum(rows.column("success").cast(pa.int64())).as_py() or 0) if rows.num_rows else 0
    return Tally(
        episodes=rows.num_rows,
        successes=successes,
        histogram=_arrow_histogram(steps),
        by_robot=_groups(rows, "robot_id"),
        by_task=_groups(rows, "task"),
        sample=sample_ids(pc.unique(rows.column("episode_id").combine_chunks())),
    )


def tally_catalog(run: Callable[[str], pa.Table], where: str) -> Tally:
    """The Tally of the catalog's episodes `where` selects, counted by ClickHouse in a few small
    queries (`run` binds the parameters `where` names; only whole numbers are pasted)."""
    head = run(
        "SELECT count() AS n, sum(success) AS s, min(step_count) AS lo, max(step_count) AS hi "
        f"FROM episodes WHERE {where}"
    ).to_pylist()[0]
    n = int(head["n"])
    if n == 0:
        return Tally(0, 0, _histogram(0, 1, {}), (), (), pa.array([], pa.string()))
    lo, width = int(head["lo"]), _bins(int(head["lo"]), int(head["hi"]))
    bins = run(
        f"SELECT intDiv(step_count - {lo}, {width}) AS b, count() AS n FROM episodes WHERE {where} GROUP BY b"
    ).to_pylist()
    groups = run(
        " UNION ALL ".join(
            f"SELECT * FROM (SELECT '{g}' AS g, {c} AS k, count() AS n, sum(success) AS s FROM episodes "
            f"WHERE {where} GROUP BY k ORDER BY n DESC, k LIMIT {MAX_GROUPS})"
            for g, c in (("robot", "robot_id"), ("task", "task"))
        )
    ).to_pylist()
    # the sample: SAMPLE_RUNS runs of consecutive ids spread over the selection (sample_ids)
    if n <= SKETCH_SAMPLE:
        runs = [(0, n)]
    else:
        runs = [((n * k) // SAMPLE_RUNS, SKETCH_SAMPLE // SAMPLE_RUNS) for k in range(SAMPLE_RUNS)]
    parts = [
        f"SELECT * FROM (SELECT episode_id FROM episodes WHERE {where} ORDER BY episode_id "
        f"LIMIT {int(count)} OFFSET {int(offset)})"
        for offset, count in runs
    ]
    sample = run(" UNION ALL ".join(parts)).column("episode_id").combine_chunks().cast(pa.string())

    def ordered(g: str) -> tuple[tuple[str, int, int], ...]:
        mine = sorted((r for r in groups if r["g"] == g), key=lambda r: (-int(r["n"]), str(r["k"])))
        return tuple((str(r["k"]), int(r["n"]), int(r["s"] or 0)) for r in mine)

    return Tally(
        episodes=n,
        successes=int(head["s"] or 0),
        histogram=_histogram(lo, width, {int(r["b"]): int(r["n"]) for r in bins}),
        by_robot=ordered("robot"),
        by_task=ordered("task"),
        sample=sample,
    )


def dataset_stats(
    layout: LakeLayout,
    tally: Tally,
    *,
    title: str,
    names: DimensionNames,
    pinned: pa.Array | None = None,
) -> DatasetStats:
    """The statistics of a selection from its Tally and the sketches of its sampled episodes:
    their visible attempts, or the pinned attempts (`pinned`: keys episode_id + "\\x1f" +
    attempt_id) for a pin.

    Example:
        >>> dataset_stats(layout, tally_rows(rows), title="successes", names=DimensionNames(None)).by_robot[0]
        ('arm-7', 1200, 1200)
    """
    from pi_format.lake import latest_commits, read_deleted_ids

    def keep(found: pa.Table) -> pa.Table:
        if pinned is None:
            return latest_commits(found, read_deleted_ids(layout))
        keys = pc.binary_join_element_wise(found.column("episode_id"), found.column("attempt_id"), "\x1f")
        return found.filter(pc.is_in(keys, value_set=pinned))

    distributions: tuple[Distribution, ...] = ()
    robot_type, sketched = "", 0
    if len(tally.sample):
        # kept per sample, pinned keys and table versions (_page_cache): the merge is ~0.5 s
        distributions, robot_type, sketched = _page_cache.distributions(
            layout,
            (tally.sample, pinned, id(names)),
            lambda: _distributions(_sketch_rows(layout, tally.sample, keep), names),
        )
    note = f"merged from the sketches of {sketched:,} episodes of robot type {robot_type!r}"
    if len(tally.sample) < tally.episodes:
        note += (
            f" (a sample of {len(tally.sample):,} of the {tally.episodes:,} selected: "
            f"{SAMPLE_RUNS} runs of consecutive episode ids)"
        )
    elif sketched < tally.episodes:
        note += (
            f" (of {tally.episodes:,} selected: those the lake holds, of one robot type and dimensionality)"
        )
    if distributions and not all(d.quantiles for d in distributions):
        note += "; some rows predate the quantile sketches, so only mean, std, min and max are shown"
    return DatasetStats(
        title=title,
        episodes=tally.episodes,
        histogram=tally.histogram,
        by_robot=tally.by_robot,
        by_task=tally.by_task,
        successes=tally.successes,
        distributions=distributions,
        sketched=sketched,
        robot_type=robot_type,
        note=note,
    )


def pin_rows(layout: LakeLayout, name: str) -> tuple[pa.Table, pa.Array]:
    """The lake's rows (ROW_COLUMNS) of the pinned attempts of pin `name` and the pinned keys;
    NotFound when there is no such pin."""
    from deltalake import DeltaTable
    from pi_format.lake import PinStore

    from pi_jobs.ui._ops import _pinned, _pins_named

    summary = next((s for s in PinStore(layout).summaries() if s.name == name), None)
    if summary is None:
        raise NotFound(f"no pin named {name!r}; the Pins page lists them (`pilake dataset list`)")
    pin = _pins_named(layout, [summary])[0]
    rows = DeltaTable(layout.episodes).to_pyarrow_table(columns=[*ROW_COLUMNS, "attempt_id"])
    keys = pc.binary_join_element_wise(rows.column("episode_id"), rows.column("attempt_id"), "\x1f")
    wanted = pc.binary_join_element_wise(pin.episode_ids, pin.attempt_ids, "\x1f")
    return _pinned(rows, keys, pin), wanted
