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
    """Open Parquet files of one table, each read whole once (a rewrite keeps most of a small
    file's rows: one read of the file, not one per episode), and the (episode_id, attempt_id) of
    each row."""

    def __init__(self, table_uri: str, conform: Callable[[pa.Table], pa.Table] | None = None) -> None:
        self._fs, self._base = table_filesystem(table_uri)
        self._conform = conform
        self._files: dict[str, pq.ParquetFile] = {}
        self._rows: dict[str, pa.Table] = {}
        self._ids: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self._offsets: dict[str, np.ndarray] = {}
        self._runs: dict[str, dict[tuple[str, str], tuple[int, int] | None]] = {}
        self._damaged: set[str] = set()

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

    def rows(self, path: str) -> pa.Table:
        """The whole file's rows (page CRCs checked); per-episode slices of it are zero-copy.
        Reading episode by episode (`read_row_groups` per locator) was ~0.9 ms a call, a quarter
        of a compaction's time on a lake of 200-episode files."""
        found = self._rows.get(path)
        if found is None:
            found = self.file(path).read()
            if self._conform is not None:
                found = self._conform(found)
            self._rows[path] = found
        return found

    def offsets(self, path: str) -> np.ndarray:
        """The first row of each row group, and the file's row count last."""
        found = self._offsets.get(path)
        if found is None:
            metadata = self.file(path).metadata
            sizes = [metadata.row_group(g).num_rows for g in range(metadata.num_row_groups)]
            found = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)])
            self._offsets[path] = found
        return found

    def ids(self, path: str) -> tuple[np.ndarray, np.ndarray]:
        found = self._ids.get(path)
        if found is None:
            table = self._whole(path)
            if table is None:  # only the id columns: the damage is in another column (repair)
                table = self.file(path).read(columns=["episode_id", "attempt_id"])
            found = (
                table.column("episode_id").to_numpy(zero_copy_only=False),
                table.column("attempt_id").to_numpy(zero_copy_only=False),
            )
            self._ids[path] = found
        return found

    def _whole(self, path: str) -> pa.Table | None:
        """The whole file's rows, or None for a file with a page that fails its CRC or does not
        decompress: repair rewrites such a file keeping the episodes around the damage, so their
        rows are then read row group by row group (as before files were read whole)."""
        if path in self._damaged:
            return None
        try:
            return self.rows(path)
        except (OSError, pa.ArrowException):
            self._damaged.add(path)
            return None

    def rows_at(self, path: str, offset: int, length: int) -> pa.Table:
        """Rows [offset, offset + length) of the file (conformed, page CRCs checked)."""
        whole = self._whole(path)
        if whole is not None:
            return whole.slice(offset, length)
        offsets = self.offsets(path)
        first = int(np.searchsorted(offsets, offset, side="right")) - 1
        last = max(int(np.searchsorted(offsets, offset + length, side="left")), first + 1)
        rows = self.file(path).read_row_groups(list(range(first, last)))
        if self._conform is not None:
            rows = self._conform(rows)
        return rows.slice(offset - int(offsets[first]), length)

    def close(self) -> None:
        self._damaged.clear()
        self._files.clear()
        self._rows.clear()
        self._ids.clear()
        self._offsets.clear()
        self._runs.clear()

    def runs(self, path: str) -> dict[tuple[str, str], tuple[int, int] | None]:
        """(episode_id, attempt_id) -> (first row, rows) of each pair's run of rows in the file,
        None for a pair whose rows are not one contiguous run; computed once per file (a scan of
        the file's ids per episode was O(rows) each)."""
        found = self._runs.get(path)
        if found is None:
            episode_ids, attempt_ids = self.ids(path)
            n = len(episode_ids)
            change = np.ones(n, dtype=bool)
            if n > 1:
                change[1:] = (episode_ids[1:] != episode_ids[:-1]) | (attempt_ids[1:] != attempt_ids[:-1])
            starts = np.flatnonzero(change)
            ends = np.append(starts[1:], n)
            found = {}
            for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
                key = (str(episode_ids[start]), str(attempt_ids[start]))
                found[key] = None if key in found else (start, end - start)
            self._runs[path] = found
        return found


def _steps_of(source: _SourceFiles, marker: dict[str, Any]) -> pa.Table:
    path, first, count = marker["steps_file"], marker["steps_row_group"], int(marker["step_count"])
    if not path or first is None or first < 0 or count == 0:
        return TABLE_SCHEMAS["steps"].empty_table()
    offsets = source.offsets(path)
    groups = len(offsets) - 1
    if first >= groups:
        raise LakeError(
            f"steps file {path} has {groups} row groups; the locator of "
            f"{marker['episode_id']}/{marker['attempt_id']} names row group {first}: run `pilake audit`"
        )
    last = min(first + math.ceil(count / int(offsets[first + 1] - offsets[first])), groups)
    offset, length = int(offsets[first]), int(offsets[last] - offsets[first])
    _check_rows(source, path, offset, length, marker, count)
    return source.rows_at(path, offset, length)


def _video_of(source: _SourceFiles, marker: dict[str, Any]) -> pa.Table:
    path, starts = marker["video_file"], marker["video_row_groups"]
    if not path or not starts:
        return TABLE_SCHEMAS["video"].empty_table()
    start = int(min(starts))
    run = source.runs(path).get((marker["episode_id"], marker["attempt_id"]))
    if run is None or run[0] != start:
        raise LakeError(
            f"video rows of {marker['episode_id']}/{marker['attempt_id']} in {path} are not the "
            f"contiguous run at row {start} its locator names"
        )
    rows = source.rows_at(path, start, run[1])  # conformed to the video schema (_conform_video)
    check_chunk_crcs(rows, where={"table": "video", "file": path})
    return rows


def _conform_video(rows: pa.Table) -> pa.Table:
    """A video file's rows in the video table's schema, once per file."""
    if CHUNK_CRC_COLUMN not in rows.column_names:  # written before chunk checksums: stays null
        rows = rows.append_column(pa.field(CHUNK_CRC_COLUMN, pa.int64()), pa.nulls(rows.num_rows, pa.int64()))
    return rows.select(TABLE_SCHEMAS["video"].names).cast(TABLE_SCHEMAS["video"])


def _check_rows(
    source: _SourceFiles, path: str, offset: int, rows: int, marker: dict[str, Any], count: int
) -> None:
    episode_ids, attempt_ids = source.ids(path)
    ok = (
        rows >= count
        and bool(np.all(episode_ids[offset : offset + count] == marker["episode_id"]))
        and bool(np.all(attempt_ids[offset : offset + count] == marker["attempt_id"]))
    )
    if not ok:
        raise LakeError(
            f"steps file {path} does not hold the {count} rows of {marker['episode_id']}/"
            f"{marker['attempt_id']} where its locator says; the lake is inconsistent: run `pilake audit`"
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
    steps_source = _SourceFiles(layout.steps)
    video_source = _SourceFiles(layout.video, conform=_conform_video)
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
