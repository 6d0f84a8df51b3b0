"""Rewriting committed episodes into new files: the lake-table protocol's half for maintenance
(compaction merges small files, GC drops rows no one needs), written once here (SPEC.md §7.10).

The unit is a *file group*: episodes files and the steps and video files their markers' locators
name, closed under that relation. A group commit makes one (one file per table); a rewrite
makes larger ones. A rewrite reads the markers it keeps, copies exactly their rows (an
episode's steps row groups and video rows, found through its locator) into new files laid out
as `LakeWriter` lays them out (SPEC.md §7.8), gives the markers their new locators, and commits,
per table in the commit order of §7.7 — steps, then video, then episodes last — the new files
together with the removal of the group's old ones (`data_change=false`: the same rows). Between
those commits the current markers still name the old files, which stay on disk until GC finds
no marker naming them, so a reader never meets a missing file. A rewrite that dies before its
episodes commit leaves new steps and video files no marker names: GC removes them.

Memory is bounded by `target_file_bytes`: groups are taken in order, the rows of as many as fit
are read, sorted by episode_id (one episode's rows stay together: a block-shuffled sample reads
neighbouring steps) and written as one new file group.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pi_format.errors import LakeError
from pi_format.lake._commit import commit_actions, file_sizes
from pi_format.lake._files import (
    STEPS_ROW_GROUP_STEPS,
    WrittenFile,
    lay_out_group,
    table_filesystem,
    write_file,
)
from pi_format.lake.file_groups import REWRITTEN_TABLES, FileGroup
from pi_format.lake.integrity import CHUNK_CRC_COLUMN, check_chunk_crcs
from pi_format.lake.layout import LakeLayout
from pi_format.lake.schemas import LOCATOR_COLUMNS, TABLE_SCHEMAS
from pi_format.lake.tables import ensure_lake_tables

_DEFAULT_TARGET_FILE_BYTES = 128 * 1024 * 1024


@dataclass(slots=True)
class RewriteResult:
    """What a rewrite did, per table."""

    markers_kept: int = 0
    groups: int = 0
    files_removed: dict[str, int] = field(default_factory=dict)
    files_added: dict[str, int] = field(default_factory=dict)
    bytes_removed: dict[str, int] = field(default_factory=dict)
    bytes_added: dict[str, int] = field(default_factory=dict)
    versions: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0


class _SourceFiles:
    """Open Parquet files of one table, and the (episode_id, attempt_id) of each video row."""

    def __init__(self, table_uri: str) -> None:
        self._fs, self._base = table_filesystem(table_uri)
        self._files: dict[str, pq.ParquetFile] = {}
        self._ids: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    def file(self, path: str) -> pq.ParquetFile:
        found = self._files.get(path)
        if found is None:
            try:
                # every page's CRC checked as it is read: a rewrite never copies corrupt bytes
                # into a new file with fresh checksums (architecture decision 10)
                found = pq.ParquetFile(
                    self._fs.open_input_file(f"{self._base}/{path}"), page_checksum_verification=True
                )
            except FileNotFoundError as err:
                raise LakeError(
                    f"{self._base}/{path} is named by a marker's locator but gone; run `pilake audit` "
                    "and do not delete data files by hand"
                ) from err
            self._files[path] = found
        return found

    def ids(self, path: str) -> tuple[np.ndarray, np.ndarray]:
        found = self._ids.get(path)
        if found is None:
            table = self.file(path).read(columns=["episode_id", "attempt_id"])
            found = (
                table.column("episode_id").to_numpy(zero_copy_only=False),
                table.column("attempt_id").to_numpy(zero_copy_only=False),
            )
            self._ids[path] = found
        return found

    def close(self) -> None:
        self._files.clear()
        self._ids.clear()


def _steps_of(source: _SourceFiles, marker: dict[str, Any]) -> pa.Table:
    path, first, count = marker["steps_file"], marker["steps_row_group"], int(marker["step_count"])
    if not path or first is None or first < 0 or count == 0:
        return TABLE_SCHEMAS["steps"].empty_table()
    parquet = source.file(path)
    group_rows = parquet.metadata.row_group(first).num_rows
    groups = list(range(first, first + math.ceil(count / group_rows)))
    rows = parquet.read_row_groups(groups)
    _check_rows(rows, marker, count, f"steps file {path}")
    return rows


def _video_of(source: _SourceFiles, marker: dict[str, Any]) -> pa.Table:
    path, starts = marker["video_file"], marker["video_row_groups"]
    if not path or not starts:
        return TABLE_SCHEMAS["video"].empty_table()
    episode_ids, attempt_ids = source.ids(path)
    start = int(min(starts))
    mine = (episode_ids == marker["episode_id"]) & (attempt_ids == marker["attempt_id"])
    rows_at = np.flatnonzero(mine)
    if not len(rows_at) or rows_at[0] != start or rows_at[-1] - start + 1 != len(rows_at):
        raise LakeError(
            f"video rows of {marker['episode_id']}/{marker['attempt_id']} in {path} are not the "
            f"contiguous run at row {start} its locator names"
        )
    parquet = source.file(path)
    if parquet.metadata.num_row_groups == parquet.metadata.num_rows:  # one row per group (§7.8)
        rows = parquet.read_row_groups(list(range(start, start + len(rows_at))))
    else:
        rows = parquet.read().slice(start, len(rows_at))
    if CHUNK_CRC_COLUMN not in rows.column_names:  # written before chunk checksums: stays null
        rows = rows.append_column(pa.field(CHUNK_CRC_COLUMN, pa.int64()), pa.nulls(rows.num_rows, pa.int64()))
    check_chunk_crcs(rows, where={"table": "video", "file": path})
    return rows.select(TABLE_SCHEMAS["video"].names).cast(TABLE_SCHEMAS["video"])


def _check_rows(rows: pa.Table, marker: dict[str, Any], count: int, where: str) -> None:
    first_rows = rows.slice(0, count)
    ok = (
        rows.num_rows >= count
        and pc.all(pc.equal(first_rows.column("episode_id"), marker["episode_id"])).as_py()
        and pc.all(pc.equal(first_rows.column("attempt_id"), marker["attempt_id"])).as_py()
    )
    if not ok:
        raise LakeError(
            f"{where} does not hold the {count} rows of {marker['episode_id']}/{marker['attempt_id']} "
            "where its locator says; the lake is inconsistent: run `pilake audit`"
        )


def _batches(groups: Sequence[FileGroup], target_file_bytes: int) -> Iterator[list[FileGroup]]:
    batch: list[FileGroup] = []
    size = 0
    for group in groups:
        if batch and size + group.size_bytes > target_file_bytes:
            yield batch
            batch, size = [], 0
        batch.append(group)
        size += group.size_bytes
    if batch:
        yield batch


def _key(episode_ids: Sequence[str], attempt_ids: Sequence[str]) -> pa.Array:
    return pc.binary_join_element_wise(
        pa.array(list(episode_ids), pa.string()), pa.array(list(attempt_ids), pa.string()), "\x1f"
    )


def rewrite_groups(
    layout: LakeLayout,
    groups: Sequence[FileGroup],
    keep: Callable[[pa.Table], pa.Array] | None = None,
    *,
    target_file_bytes: int = _DEFAULT_TARGET_FILE_BYTES,
    writer_id: str = "rewrite",
    steps_group_steps: int = STEPS_ROW_GROUP_STEPS,
    progress: Callable[[int, int], None] | None = None,
) -> RewriteResult:
    """Rewrite `groups` into new file groups of up to ~`target_file_bytes` each, keeping the
    markers for which `keep(markers)` is True (all when None) and exactly their rows, and
    remove the old files; see the module docstring for the commit order.

    Example:
        >>> plan = read_lake_files(layout)
        >>> rewrite_groups(layout, [g for g in plan.groups if g.size_bytes < 8 << 20]).files_added
        {'steps': 1, 'video': 1, 'episodes': 1}
    """
    started = time.monotonic()
    result = RewriteResult()
    if not groups:
        return result
    if target_file_bytes < 1:
        raise ValueError(f"target_file_bytes must be >= 1, got {target_file_bytes}")
    tables = ensure_lake_tables(layout)
    sizes = {name: file_sizes(tables[name]) for name in REWRITTEN_TABLES}
    written: dict[str, list[WrittenFile]] = {name: [] for name in REWRITTEN_TABLES}
    steps_source, video_source = _SourceFiles(layout.steps), _SourceFiles(layout.video)
    schema = pa.schema(tables["episodes"].schema().to_arrow())
    e_fs, e_base = table_filesystem(layout.episodes)
    done = 0
    try:
        for batch in _batches(groups, target_file_bytes):
            import pyarrow.dataset as pads

            paths = [f"{e_base}/{p}" for g in batch for p in g.episodes_files]
            checked = pads.ParquetFileFormat(
                default_fragment_scan_options=pads.ParquetFragmentScanOptions(page_checksum_verification=True)
            )
            markers = pads.dataset(paths, format=checked, schema=schema, filesystem=e_fs).to_table()
            markers = _conform_markers(markers)
            if keep is not None and markers.num_rows:
                markers = markers.filter(keep(markers))
            markers = markers.sort_by([("episode_id", "ascending"), ("attempt_id", "ascending")])
            # one marker per pair: a row read twice (a duplicated file) is kept once
            keys = _key(markers.column("episode_id").to_pylist(), markers.column("attempt_id").to_pylist())
            values = keys.to_numpy(zero_copy_only=False)
            if len(values):
                first = np.concatenate([[True], values[1:] != values[:-1]])
                markers = markers.filter(pa.array(first))
            if markers.num_rows:
                for name, file in _write_group(
                    layout, markers, steps_source, video_source, writer_id, steps_group_steps
                ):
                    written[name].append(file)
            result.markers_kept += markers.num_rows
            done += len(batch)
            if progress is not None:
                progress(done, len(groups))
            steps_source.close()
            video_source.close()
    finally:
        steps_source.close()
        video_source.close()
    old = {
        "steps": sorted({p for g in groups for p in g.steps_files}),
        "video": sorted({p for g in groups for p in g.video_files}),
        "episodes": sorted({p for g in groups for p in g.episodes_files}),
    }
    for name in REWRITTEN_TABLES:  # steps, video, then episodes last (SPEC.md §7.7)
        removes = [(p, sizes[name].get(p)) for p in old[name] if p in sizes[name]]
        if not removes and not written[name]:
            continue
        result.versions[name] = commit_actions(
            tables[name],
            name,
            adds=written[name],
            removes=removes,
            data_change=False,
            operation="rewrite",
        )
        result.files_removed[name] = len(removes)
        result.files_added[name] = len(written[name])
        result.bytes_removed[name] = sum(int(s or 0) for _, s in removes)
        result.bytes_added[name] = sum(w.size_bytes for w in written[name])
    result.groups = len(groups)
    result.seconds = time.monotonic() - started
    return result


def _conform_markers(markers: pa.Table) -> pa.Table:
    schema = TABLE_SCHEMAS["episodes"]
    for f in schema:
        if f.name not in markers.column_names:
            markers = markers.append_column(f, pa.nulls(markers.num_rows, f.type))
    return markers.select(schema.names).cast(schema)


def _write_group(
    layout: LakeLayout,
    markers: pa.Table,
    steps_source: _SourceFiles,
    video_source: _SourceFiles,
    writer_id: str,
    steps_group_steps: int,
) -> list[tuple[str, WrittenFile]]:
    """Copy the rows of `markers` (sorted) into one new steps, video and episodes file; returns
    them, not committed."""
    episodes = []
    for marker in markers.select(
        ["episode_id", "attempt_id", "step_count", "cameras", *LOCATOR_COLUMNS]
    ).to_pylist():
        if int(marker["step_count"]) and (not marker["steps_file"] or marker["video_row_groups"] is None):
            raise LakeError(
                f"episode {marker['episode_id']}/{marker['attempt_id']} was written before locators "
                "existed (its rows are found only by scanning); such file groups are left as they are"
            )
        steps = _steps_of(steps_source, marker).slice(0, int(marker["step_count"]))
        episodes.append((marker["cameras"], steps, _video_of(video_source, marker)))
    laid = lay_out_group(episodes, steps_group_steps)  # as LakeWriter lays a group out (§7.8)
    steps_file, video_file = laid.write(layout.steps, layout.video, writer_id=writer_id)
    out: list[tuple[str, WrittenFile]] = [
        (name, file) for name, file in (("steps", steps_file), ("video", video_file)) if file is not None
    ]
    markers = laid.locate(markers, steps_file, video_file)
    out.append(
        (
            "episodes",
            write_file(layout.episodes, markers, [markers.num_rows], writer_id=writer_id, compression="zstd"),
        )
    )
    return out
