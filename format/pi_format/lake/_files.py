"""Data files of a group commit, written by `LakeWriter` itself (not by delta-rs's writer) so
that their layout is decided here and known before the commit (SPEC.md §7.8):

* steps: one file per group commit, sorted by (episode_id, step_index), each episode in row
  groups of `STEPS_ROW_GROUP_STEPS` steps (its last one shorter), so a reader fetches the steps
  a sample needs (a step, its action chunk, its frame history) with one ranged read of one or
  two row groups, whatever the episode's length;
* video: one file per group commit, sorted by (episode, camera in the episode's `cameras`
  order, chunk_index), ONE row group per video row (one chunk of one camera), so a sample's
  frame costs one ranged read of its chunk;
* episodes: one file per group commit (the commit markers, with the locator filled in).

Each file becomes a Delta `AddAction` with statistics of the columns readers prune on
(`DATA_SKIPPING_COLUMNS`, declared to readers by the tables' `delta.dataSkippingStatsColumns`).
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

# Columns with statistics in the Parquet footer: the ones a reader prunes or checks on. Stats on
# every column of every one-row video row group would make the footer ~10% larger for nothing.
_STATS_COLUMNS = ("episode_id", "attempt_id", "camera", "chunk_index", "first_frame", "step_index")
# String columns that repeat within a file keep dictionary encoding (every writer of the lake,
# this module and delta-rs's through `table_writer_properties`).
DICT_COLUMNS = ("episode_id", "attempt_id", "camera", "codec", "robot_id", "robot_type", "task")
# The columns whose Delta add-action statistics every lake file carries (data skipping); every
# lake table declares them in `delta.dataSkippingStatsColumns`.
DATA_SKIPPING_COLUMNS = ("episode_id", "attempt_id")
# Steps per steps row group (SPEC.md §7.8). A sample reads the row groups holding its window of
# steps (its action chunk and frame history: 10-50 steps), so a smaller group reads fewer bytes
# per sample (~64 -> 113 steps on average for a 50-step window) and a larger one parses fewer
# page headers per read; one row group per episode made a sample of a 3,000-step episode read
# all 3,000. Readers take an episode's group size from its first row group, never from here.
STEPS_ROW_GROUP_STEPS = 64


@dataclass(frozen=True, slots=True)
class WrittenFile:
    """A data file written into a table's directory, not yet committed."""

    relative_path: str  # as the Delta log records it
    size_bytes: int
    num_rows: int
    stats_json: str

    def add_action(self) -> Any:
        from deltalake.transaction import AddAction

        return AddAction(
            path=self.relative_path,
            size=self.size_bytes,
            partition_values={},
            modification_time=int(time.time() * 1000),
            data_change=True,
            stats=self.stats_json,
        )


def table_filesystem(table_uri: str) -> tuple[Any, str]:
    """The pyarrow filesystem of a table URI (or local path) and the path within it."""
    from pyarrow import fs

    if "://" in table_uri:
        return fs.FileSystem.from_uri(table_uri)
    return fs.LocalFileSystem(), os.path.abspath(table_uri)


def _delta_stats(table: pa.Table) -> str:
    """The add action's statistics: the row count, and the null count and min/max of the
    columns readers prune on (`DATA_SKIPPING_COLUMNS`). The tables declare those columns in
    `delta.dataSkippingStatsColumns` (`TABLE_CONFIGURATION`): without it delta-rs takes a
    column left out of the statistics for one without values and skips every file on a filter
    over it (measured: `step_index == 0` read 0 of 48 rows). Statistics of every column, as
    delta-rs's writer records them, made the episodes table's checkpoint 5x larger (3.9 MB at
    100,000 episodes) and its commits 16% slower."""
    mins: dict[str, object] = {}
    maxs: dict[str, object] = {}
    nulls: dict[str, int] = {}
    for name in DATA_SKIPPING_COLUMNS:
        if name in table.column_names and table.num_rows:
            column = table.column(name)
            bounds = pc.min_max(column)
            mins[name] = bounds["min"].as_py()
            maxs[name] = bounds["max"].as_py()
            nulls[name] = column.null_count
    return json.dumps(
        {"numRecords": table.num_rows, "minValues": mins, "maxValues": maxs, "nullCount": nulls},
        separators=(",", ":"),
    )


def write_file(
    table_uri: str,
    table: pa.Table,
    row_group_rows: list[int],
    *,
    writer_id: str,
    compression: str,
    footer_statistics: bool = True,
) -> WrittenFile:
    """Write `table` as one Parquet file under `table_uri` with row groups of exactly
    `row_group_rows` rows each (in order; they must add up to the table's rows).
    `footer_statistics=False` writes no column statistics and no dictionaries: for files of many
    tiny row groups (video, one chunk each) whose footer every cold read has to parse (measured:
    31% smaller footer; readers check the row's own columns, not statistics).

    Example:
        >>> f = write_file("/lake/steps", rows, [600, 450], writer_id="sink-0", compression="zstd")
        >>> f.relative_path
        'part-sink-0-3f6c...parquet'
    """
    if sum(row_group_rows) != table.num_rows or any(n <= 0 for n in row_group_rows):
        raise ValueError(
            f"row groups of {row_group_rows} rows do not partition the {table.num_rows} rows to write"
        )
    fs, base = table_filesystem(table_uri)
    # The writer id in the name tells an operator which writer left a file (e.g. one whose
    # commit never came); the uuid makes it unique across writers and retries.
    safe_writer = "".join(c if c.isalnum() or c in "-_" else "_" for c in writer_id)
    name = f"part-{safe_writer}-{uuid.uuid4().hex}.parquet"
    names = table.column_names
    with fs.open_output_stream(f"{base}/{name}") as sink:
        writer = pq.ParquetWriter(
            sink,
            table.schema,
            compression=compression,
            use_dictionary=[c for c in DICT_COLUMNS if c in names] if footer_statistics else False,
            write_statistics=[c for c in _STATS_COLUMNS if c in names] if footer_statistics else False,
            # every page carries the CRC-32 of its stored bytes, which every reader checks
            # (architecture decision 10; pi_format.lake.integrity): a zstd frame has no checksum
            # of its own, and a flipped bit decodes to wrong values of the right size
            write_page_checksum=True,
        )
        # one writer call per run of equal row groups (a video file's thousands of one-row
        # groups in one call): a call per row group was 0.2 ms of Python each, most of a
        # compaction's time (SPEC.md §7.8 layout unchanged: the writer cuts the run at `rows`);
        # and contiguous columns: the writer's per-row-group cost over a table of one chunk per
        # episode (a rewrite's concatenated slices) was 4x that over one chunk (measured: 12,000
        # one-row video groups 6.7 s vs 1.7 s, the combine 0.12 s)
        table = table.combine_chunks()
        start = 0
        for rows, count in row_group_runs(row_group_rows):
            writer.write_table(table.slice(start, rows * count), row_group_size=rows)
            start += rows * count
        writer.close()
    size = fs.get_file_info(f"{base}/{name}").size
    return WrittenFile(
        relative_path=name, size_bytes=int(size), num_rows=table.num_rows, stats_json=_delta_stats(table)
    )


def row_group_runs(row_group_rows: Sequence[int]) -> list[tuple[int, int]]:
    """`row_group_rows` as (rows, count) runs of consecutive equal sizes, in order.

    Example:
        >>> row_group_runs([1, 1, 1, 64, 64, 22])
        [(1, 3), (64, 2), (22, 1)]
    """
    runs: list[tuple[int, int]] = []
    for rows in row_group_rows:
        if runs and runs[-1][0] == rows:
            runs[-1] = (rows, runs[-1][1] + 1)
        else:
            runs.append((rows, 1))
    return runs


def sort_steps(steps: pa.Table, group_steps: int = STEPS_ROW_GROUP_STEPS) -> tuple[pa.Table, list[int]]:
    """Steps of one episode in step_index order, checked to be 0..T-1, and its row groups' sizes:
    `group_steps` steps each, the last one shorter.

    Example:
        >>> sort_steps(steps_of_150, group_steps=64)[1]
        [64, 64, 22]
    """
    if group_steps < 1:
        raise ValueError(f"group_steps must be >= 1, got {group_steps}")
    ordered = steps.sort_by([("step_index", "ascending")])
    index = ordered.column("step_index").to_numpy()
    if not np.array_equal(index, np.arange(len(index))):
        raise ValueError("steps must have step_index 0..T-1 without gaps or repeats")
    return ordered, group_sizes(ordered.num_rows, group_steps)


def group_sizes(num_rows: int, group_rows: int) -> list[int]:
    """Row group sizes of `num_rows` rows in groups of `group_rows`, the last one shorter.

    Example:
        >>> group_sizes(150, 64)
        [64, 64, 22]
    """
    return [min(group_rows, num_rows - start) for start in range(0, num_rows, group_rows)]


def sort_video(video: pa.Table, cameras: list[str]) -> tuple[pa.Table, list[int]]:
    """Video rows of one episode in (camera in `cameras` order, chunk_index) order, and each
    camera's first row (its chunk 0) relative to the episode's first row.

    Raises:
        ValueError: a camera's chunks are not 0..n-1, or a row names a camera not in `cameras`.
    """
    if video.num_rows == 0:
        return video, [0] * len(cameras)
    camera_of_row = video.column("camera").to_pylist()
    unknown = sorted(set(camera_of_row) - set(cameras))
    if unknown:
        raise ValueError(f"video rows of cameras {unknown} that the episodes row does not list ({cameras})")
    position = pa.array([cameras.index(c) for c in camera_of_row], pa.int32())
    keyed = video.append_column("__camera_position", position)
    ordered = keyed.sort_by([("__camera_position", "ascending"), ("chunk_index", "ascending")])
    positions = ordered.column("__camera_position").to_numpy()
    chunks = ordered.column("chunk_index").to_numpy()
    starts: list[int] = []
    for k, camera in enumerate(cameras):
        rows = np.flatnonzero(positions == k)
        if rows.size and not np.array_equal(chunks[rows], np.arange(rows.size)):
            raise ValueError(f"camera {camera!r}: chunk_index must be 0..{rows.size - 1} without gaps")
        starts.append(int(rows[0]) if rows.size else int(np.searchsorted(positions, k)))
    return ordered.drop_columns(["__camera_position"]), starts


@dataclass(frozen=True, slots=True)
class GroupLayout:
    """A group of episodes laid out for one steps file and one video file (SPEC.md §7.8), and
    where each episode's rows land (its locator), before anything is written. `LakeWriter`'s
    group commits and the rewrites of compaction and GC (`pi_format.lake.rewrite`) both lay
    files out through it, so the layout readers rely on is written once."""

    steps: pa.Table  # every episode's steps, in order; row groups of `steps_groups` rows
    steps_groups: list[int]
    video: pa.Table  # every episode's video rows, one row per row group
    steps_row_group: list[int]  # per episode: its first steps row group (-1: no steps)
    video_row_groups: list[list[int]]  # per episode, per camera: the row of its chunk 0

    def write(
        self, steps_uri: str, video_uri: str, *, writer_id: str
    ) -> tuple[WrittenFile | None, WrittenFile | None]:
        """Write the steps file (zstd, footer statistics) and the video file (uncompressed:
        encoded video does not compress further; no footer statistics: every cold read parses
        the footer); None for a file without rows."""
        steps_file = video_file = None
        if self.steps.num_rows:
            steps_file = write_file(
                steps_uri, self.steps, self.steps_groups, writer_id=writer_id, compression="zstd"
            )
        if self.video.num_rows:
            video_file = write_file(
                video_uri,
                self.video,
                [1] * self.video.num_rows,
                writer_id=writer_id,
                compression="none",
                footer_statistics=False,
            )
        return steps_file, video_file

    def locate(
        self, markers: pa.Table, steps_file: WrittenFile | None, video_file: WrittenFile | None
    ) -> pa.Table:
        """`markers` (one per episode, in the layout's order) with their locator columns set."""
        from pi_format.lake.schemas import LOCATOR_COLUMNS

        n = markers.num_rows
        values: dict[str, list[Any]] = {
            "steps_file": [steps_file.relative_path if steps_file else None] * n,
            "steps_row_group": self.steps_row_group,
            "video_file": [video_file.relative_path if video_file else None] * n,
            "video_row_groups": self.video_row_groups,
        }
        for column in LOCATOR_COLUMNS:
            index = markers.schema.get_field_index(column)
            field = markers.schema.field(index)
            markers = markers.set_column(index, field, pa.array(values[column], field.type))
        return markers


def lay_out_group(
    episodes: Sequence[tuple[Sequence[str], pa.Table, pa.Table]],
    steps_group_steps: int = STEPS_ROW_GROUP_STEPS,
) -> GroupLayout:
    """Lay out `episodes` ((cameras, steps rows, video rows) each, in file order): each episode's
    steps in row groups of `steps_group_steps` (`sort_steps`), its video rows by camera and chunk
    (`sort_video`).

    Example:
        >>> laid = lay_out_group([(["front"], steps_a, video_a), (["front"], steps_b, video_b)])
        >>> laid.steps_row_group, laid.video_row_groups
        ([0, 2], [[0], [12]])
    """
    steps_parts: list[pa.Table] = []
    video_parts: list[pa.Table] = []
    steps_groups: list[int] = []
    first_groups: list[int] = []
    chunk_rows: list[list[int]] = []
    video_rows = 0
    for cameras, steps, video in episodes:
        steps, groups = sort_steps(steps, steps_group_steps)
        video, starts = sort_video(video, [str(c) for c in cameras])
        first_groups.append(len(steps_groups) if groups else -1)
        chunk_rows.append([video_rows + s for s in starts])
        steps_parts.append(steps)
        steps_groups += groups
        video_parts.append(video)
        video_rows += video.num_rows
    return GroupLayout(
        steps=pa.concat_tables(steps_parts),
        steps_groups=steps_groups,
        video=pa.concat_tables(video_parts),
        steps_row_group=first_groups,
        video_row_groups=chunk_rows,
    )
