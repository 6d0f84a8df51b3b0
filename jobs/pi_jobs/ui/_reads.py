"""What the Overview and Episode pages show, read through the project's own readers: the
catalog (pi_catalog), the lake's visibility rule (pi_format.lake), the operator tools
(pi_jobs.ops: quarantine, freshness, trace) and the annotations table. Read-only (the
Quarantine and Pins pages read in `_ops`).
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter, OrderedDict
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pi_format import LakeLayout
from pi_format.lake import AnnotationStore, latest_commits, read_deleted_ids

from pi_jobs.ui._errors import NotFound
from pi_jobs.ui._sql import cell

# Freshness is summarised over the last hour, as `pilake freshness --since 1h` does by default.
_FRESHNESS_WINDOW_S = 3600.0


def iso(ns: int | None) -> str:
    """Nanoseconds since the epoch as UTC text ('-' for None)."""
    if ns is None:
        return "-"
    return datetime.fromtimestamp(ns / 1e9, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def delta_table(path: str, **kwargs: Any) -> pa.Table | None:
    """The rows of the Delta table at `path` (to_pyarrow_table's arguments), None when there is none."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        table = DeltaTable(path)
    except TableNotFoundError:
        return None
    return table.to_pyarrow_table(**kwargs)


@dataclass(frozen=True, slots=True)
class Overview:
    """The lake at a glance (the Overview page)."""

    episodes: int
    hours: float
    robots: int
    tasks: int
    commits_hour_s: tuple[int, ...]  # start of each hour (unix seconds) with commits
    commits_count: tuple[int, ...]
    freshness_count: int
    freshness_p50_s: float | None
    freshness_p95_s: float | None
    quarantine_by_reason: tuple[tuple[str, int], ...]
    last_commit: dict[str, str] | None


def overview(catalog: Any, layout: LakeLayout, *, hours_shown: int = 168) -> Overview:
    """Totals, commits per hour (the last `hours_shown` hours with data), freshness of the last
    hour, open quarantine by reason and the last commit."""
    from pi_jobs.ops.freshness import read_freshness, summarize
    from pi_jobs.ops.quarantine import list_quarantine

    # a catalog that nothing has written to yet gets its (empty) tables, as `pilake freshness`
    # does: the page then says "0 episodes" instead of failing
    catalog.ensure_schema()
    totals = catalog.query_arrow(
        "SELECT count() AS n, sum(duration_s) AS seconds, uniqExact(robot_id) AS robots, "
        "uniqExact(task) AS tasks, max(committed_at_ns) AS last FROM episodes"
    ).to_pylist()[0]
    n = int(totals["n"])
    hours_s: tuple[int, ...] = ()
    counts: tuple[int, ...] = ()
    last: dict[str, str] | None = None
    if n:
        per_hour = catalog.query_arrow(
            "SELECT intDiv(committed_at_ns, 3600000000000) * 3600 AS hour, count() AS n FROM episodes "
            "WHERE committed_at_ns >= {since:Int64} GROUP BY hour ORDER BY hour",
            {"since": int(totals["last"]) - hours_shown * 3_600_000_000_000},
        )
        hours_s = tuple(int(v) for v in per_hour.column("hour").to_pylist())
        counts = tuple(int(v) for v in per_hour.column("n").to_pylist())
        row = catalog.query_arrow(
            "SELECT episode_id, robot_id, task, committed_at_ns FROM episodes "
            "ORDER BY committed_at_ns DESC, episode_id DESC LIMIT 1"
        ).to_pylist()[0]
        last = {
            "episode_id": str(row["episode_id"]),
            "robot_id": str(row["robot_id"]),
            "task": str(row["task"]),
            "committed_at": iso(int(row["committed_at_ns"])),
        }
    fresh = read_freshness(catalog, since_s=_FRESHNESS_WINDOW_S)
    summary = summarize(fresh.latencies_s(), missing_published=fresh.missing_published)
    reasons = Counter(e.reason for e in list_quarantine(layout))
    return Overview(
        episodes=n,
        hours=float(totals["seconds"] or 0.0) / 3600.0,
        robots=int(totals["robots"]),
        tasks=int(totals["tasks"]),
        commits_hour_s=hours_s,
        commits_count=counts,
        freshness_count=summary.count,
        freshness_p50_s=summary.p50_s,
        freshness_p95_s=summary.p95_s,
        quarantine_by_reason=tuple(sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))),
        last_commit=last,
    )


@dataclass(frozen=True, slots=True)
class Episode:
    """One visible episode: its marker row, every attempt, its steps as plot series."""

    episode_id: str
    attempt_id: str
    row: dict[str, Any]  # the visible episodes row
    attempts: tuple[dict[str, str], ...]  # every attempt: id, committed, featurizer, visible
    cameras: tuple[str, ...]
    # per camera: its first frame's time from the first step (s); a camera's MP4 clock starts at
    # its first frame, so the page adds this to video.currentTime to place the plot cursor
    camera_offsets_s: tuple[float, ...]
    times_s: tuple[float, ...]  # per step, from the first step
    proprio: tuple[tuple[float, ...], ...]  # per dimension, per step
    action: tuple[tuple[float, ...], ...]

    def metadata(self) -> list[tuple[str, str]]:
        """(column, value) of the indexed metadata, statistics and locators left out."""
        skip = {"proprio_mean", "proprio_std", "proprio_min", "proprio_max", "action_mean", "action_std"}
        skip |= {"action_min", "action_max", "proprio_sketch", "action_sketch", "proprio_m2", "action_m2"}
        skip |= {"proprio_mean64", "action_mean64"}
        out = []
        for key, value in self.row.items():
            if key in skip:
                continue
            out.append((key, iso(value) if key.endswith("_at_ns") or key == "start_time_ns" else cell(value)))
        return out

    def stats(self) -> list[tuple[str, int, str, str, str, str]]:
        """(feature, dim, mean, std, min, max) per dimension of proprio and action."""
        out = []
        for feature in ("proprio", "action"):
            cols = [self.row.get(f"{feature}_{s}") or [] for s in ("mean", "std", "min", "max")]
            for d, (mean, std, lo, hi) in enumerate(zip(*cols, strict=False)):
                out.append((feature, d, f"{mean:.4g}", f"{std:.4g}", f"{lo:.4g}", f"{hi:.4g}"))
        return out


def _series(steps: pa.Table, column: str) -> tuple[tuple[float, ...], ...]:
    values = steps.column(column).to_pylist()
    if not values:
        return ()
    return tuple(tuple(float(v[d]) for v in values) for d in range(len(values[0])))


def episode_rows(layout: LakeLayout, episode_id: str) -> tuple[dict[str, Any], pa.Table]:
    """The visible episodes row of `episode_id` (the lake's rule: `latest_commits`, deleted
    episodes out) and every attempt's row; NotFound when it is not visible."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError
    from pi_format.lake import NORM_STATS_COLUMNS

    try:
        table = DeltaTable(layout.episodes)
    except TableNotFoundError:
        raise NotFound(f"episode {episode_id!r} is not in the lake at {layout.root}") from None
    # not the mergeable statistics (two ~2 kB sketches a row): the page does not show them, and
    # a compacted episodes file holds ~2,000 rows in one row group (0.55 -> 0.15 s at 100,000)
    columns = [f.name for f in table.schema().fields if f.name not in NORM_STATS_COLUMNS]
    rows = table.to_pyarrow_table(columns=columns, filters=[("episode_id", "=", episode_id)])
    if rows.num_rows == 0:
        raise NotFound(f"episode {episode_id!r} is not in the lake at {layout.root}")
    visible = latest_commits(rows, read_deleted_ids(layout))
    if visible.num_rows == 0:
        raise NotFound(f"episode {episode_id!r} was deleted from the lake (`pilake episodes delete`)")
    return visible.to_pylist()[0], rows


# Parsed Parquet footers of the last data files read by locator. A compacted file of thousands
# of episodes has tens of thousands of row groups (one video chunk each, SPEC.md §7.8): parsing
# its footer costs ~0.2 s, more than reading an episode's rows. Delta data files never change
# once written, so a footer is reused as long as its path is read (a rewrite makes new paths).
_FOOTERS: OrderedDict[str, pq.FileMetaData] = OrderedDict()
_FOOTERS_KEPT = 64
_FOOTERS_LOCK = threading.Lock()


def parquet_file(table_uri: str, path: str) -> pq.ParquetFile:
    """Data file `path` (relative, as the Delta log names it) of the table at `table_uri`, its
    footer parsed once (`_FOOTERS`)."""
    from pi_format.lake import table_filesystem

    fs, base = table_filesystem(table_uri)
    where = f"{base}/{path}"
    with _FOOTERS_LOCK:
        footer = _FOOTERS.get(where)
        if footer is not None:
            _FOOTERS.move_to_end(where)
    parquet = pq.ParquetFile(fs.open_input_file(where), metadata=footer)
    if footer is None:
        with _FOOTERS_LOCK:
            _FOOTERS[where] = parquet.metadata
            while len(_FOOTERS) > _FOOTERS_KEPT:
                _FOOTERS.popitem(last=False)
    return parquet


def _mine(rows: pa.Table, row: dict[str, Any]) -> pa.Table:
    """The rows of `row`'s attempt among `rows` (a locator names a row group; the ids checked)."""
    keep = pc.and_(
        pc.equal(rows.column("episode_id"), row["episode_id"]),
        pc.equal(rows.column("attempt_id"), row["attempt_id"]),
    )
    return rows.filter(keep)


def _located_steps(layout: LakeLayout, row: dict[str, Any]) -> pa.Table | None:
    """The steps of the marker `row` read from the row groups its locator names (SPEC.md §7.8:
    no scan of the steps table, whose file stats cannot narrow a compacted file of thousands of
    episodes); None for a row written before locators."""
    path, first, count = row.get("steps_file"), row.get("steps_row_group"), int(row["step_count"] or 0)
    if not path or first is None or first < 0:
        return None
    columns = ["episode_id", "attempt_id", "step_index", "timestamp_ns", "proprio", "action"]
    if count == 0:
        return pa.table({"step_index": pa.array([], pa.int64()), "timestamp_ns": pa.array([], pa.int64())})
    parquet = parquet_file(layout.steps, path)
    group_rows = max(parquet.metadata.row_group(first).num_rows, 1)
    groups = list(range(first, min(first + math.ceil(count / group_rows), parquet.metadata.num_row_groups)))
    return _mine(parquet.read_row_groups(groups, columns=columns), row)


def _located_video(
    layout: LakeLayout, row: dict[str, Any], camera: str, columns: list[str], *, first_only: bool = False
) -> pa.Table | None:
    """The video rows of one camera of the marker `row`, from its locator (chunk c of a camera
    is the row group of its chunk 0 plus c, one row per row group): chunk 0 only, or every
    chunk up to the first row group of another camera or episode; None for a row written
    before locators."""
    path, starts = row.get("video_file"), row.get("video_row_groups")
    cameras = list(row["cameras"])
    if not path or not starts or camera not in cameras or len(starts) != len(cameras):
        return None
    parquet = parquet_file(layout.video, path)
    meta = parquet.metadata
    start = int(starts[cameras.index(camera)])
    groups = [start]
    if not first_only:
        ids = ["episode_id", "attempt_id", "camera"]
        want = (row["episode_id"], row["attempt_id"], camera)
        at = [meta.schema.names.index(c) for c in ids]
        end = start + 1
        while end < meta.num_row_groups:
            group = meta.row_group(end)
            stats = [group.column(i).statistics for i in at]
            if all(s is not None and s.has_min_max for s in stats):
                same = all(s.min == s.max == w for s, w in zip(stats, want, strict=True))
            else:  # no statistics: read the ids of that one row group
                ids_of = parquet.read_row_group(end, columns=ids).to_pylist()
                same = bool(ids_of) and all(tuple(r[c] for c in ids) == want for r in ids_of)
            if not same:
                break
            end += 1
        groups = list(range(start, end))
    need = [
        "episode_id",
        "attempt_id",
        "camera",
        *(c for c in columns if c not in ("episode_id", "attempt_id", "camera")),
    ]
    rows = _mine(parquet.read_row_groups(groups, columns=need), row)
    return rows.filter(pc.equal(rows.column("camera"), camera))


def _first_frames(layout: LakeLayout, episode_id: str, attempt: str) -> dict[str, int]:
    """Per camera, its first frame's timestamp, scanning the video table (rows without locators)."""
    first_frames = delta_table(
        layout.video,
        columns=["camera", "frame_timestamps_ns"],  # not the frames: a few bytes per camera
        filters=[("episode_id", "=", episode_id), ("attempt_id", "=", attempt), ("chunk_index", "=", 0)],
    )
    if first_frames is None:
        return {}
    return {
        str(r["camera"]): int(r["frame_timestamps_ns"][0])
        for r in first_frames.to_pylist()
        if r["frame_timestamps_ns"]
    }


def read_episode(layout: LakeLayout, episode_id: str) -> Episode:
    """The visible attempt of `episode_id` and its steps (NotFound when it is not visible)."""
    row, rows = episode_rows(layout, episode_id)
    attempt = str(row["attempt_id"])
    attempts = tuple(
        {
            "attempt_id": str(r["attempt_id"]),
            "committed_at": iso(r["committed_at_ns"]),
            "featurizer": r.get("featurizer") or "stream job",
            "visible": "yes" if r["attempt_id"] == attempt else "superseded",
        }
        for r in sorted(rows.to_pylist(), key=lambda r: r["committed_at_ns"])
    )
    steps = _located_steps(layout, row)
    if steps is None:  # a row written before locators: scan the table for the episode's rows
        steps = delta_table(
            layout.steps,
            columns=["step_index", "timestamp_ns", "proprio", "action"],
            filters=[("episode_id", "=", episode_id), ("attempt_id", "=", attempt)],
        )
    if steps is None:  # a lake without a steps table yet
        steps = pa.table({"timestamp_ns": pa.array([], pa.int64())})
    elif steps.num_rows:
        steps = steps.sort_by("step_index")
    stamps = steps.column("timestamp_ns").to_pylist()
    origin = stamps[0] if stamps else 0
    first: dict[str, int] = {}
    for camera in row["cameras"]:
        # chunk 0 of each camera (its locator's row group), not the frames: a few bytes
        chunk = _located_video(layout, row, camera, ["frame_timestamps_ns"], first_only=True)
        if chunk is None:  # a row written before locators
            first = _first_frames(layout, episode_id, attempt)
            break
        stamps0 = chunk.column("frame_timestamps_ns").to_pylist()
        if stamps0 and stamps0[0]:
            first[str(camera)] = int(stamps0[0][0])
    return Episode(
        episode_id=episode_id,
        attempt_id=attempt,
        row=row,
        attempts=attempts,
        cameras=tuple(row["cameras"]),
        camera_offsets_s=tuple(round((first.get(c, origin) - origin) / 1e9, 6) for c in row["cameras"]),
        times_s=tuple(round((t - origin) / 1e9, 6) for t in stamps),
        proprio=_series(steps, "proprio") if stamps else (),
        action=_series(steps, "action") if stamps else (),
    )


def episode_annotations(layout: LakeLayout, episode_id: str) -> list[dict[str, str]]:
    """The episode's current annotations (empty when the lake has no annotations table)."""
    table = AnnotationStore(layout).current([episode_id])
    keep = ("kind", "value", "step_start", "step_end", "source", "version")
    return [{k: cell(r[k]) for k in keep} for r in table.to_pylist()]


def lineage(catalog: Any, episode: Episode) -> list[dict[str, str]]:
    """The backfill runs that made one of the episode's attempts (by featurizer)."""
    from pi_catalog import backfill_runs

    featurizers = {a["featurizer"] for a in episode.attempts}
    runs = backfill_runs(catalog)
    if runs.num_rows == 0:
        return []
    runs = runs.filter(pc.is_in(runs.column("featurizer"), value_set=pa.array(sorted(featurizers))))
    keep = ("run_id", "featurizer", "where_sql", "status", "committed", "failed", "started_at_ns")
    return [
        {k: iso(r[k]) if k.endswith("_ns") else cell(r[k]) for k in keep if k in r} for r in runs.to_pylist()
    ]


def trace_lines(layout: LakeLayout, catalog: Any, episode_id: str, log_dirs: tuple[Path, ...]) -> list[str]:
    """The episode's history, as `pilake trace` prints it."""
    from pi_jobs.ops.trace import trace_episode

    return [e.line() for e in trace_episode(episode_id, layout=layout, catalog=catalog, log_dirs=log_dirs)]


def video_rows(
    layout: LakeLayout, episode_id: str, attempt_id: str, camera: str, row: dict[str, Any] | None = None
) -> pa.Table:
    """The video chunks of one camera of one attempt, in chunk order: from the row groups the
    marker `row`'s locator names when given (the visible attempt's), else by a scan."""
    rows = None
    if row is not None and row["attempt_id"] == attempt_id:
        rows = _located_video(layout, row, camera, ["chunk_index", "frame_timestamps_ns", "codec", "data"])
    if rows is None:
        rows = delta_table(
            layout.video,
            columns=["chunk_index", "frame_timestamps_ns", "codec", "data"],
            filters=[
                ("episode_id", "=", episode_id),
                ("attempt_id", "=", attempt_id),
                ("camera", "=", camera),
            ],
        )
    if rows is None or rows.num_rows == 0:
        raise NotFound(f"episode {episode_id!r} has no video rows for camera {camera!r}")
    return rows.sort_by("chunk_index")


def now_text() -> str:
    """The time a page was rendered."""
    return iso(time.time_ns())
