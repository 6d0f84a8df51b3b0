"""Merging episodes files alone: the markers of small file groups into fewer episodes files, the
steps and video rows left where they are (SPEC.md §7.10, "marker merge").

A marker's locator names its steps file, row group and video rows, not the episodes file that
holds the marker, so moving markers between episodes files changes no locator. A merge reads the
markers of a batch of file groups (every page's CRC checked), keeps one marker per (episode_id,
attempt_id) as a full rewrite does, sorts them by episode_id and writes them as one episodes
file, then commits to the episodes table alone the new files together with the removal of the
old ones (`dataChange=false`: the same rows). The steps and video tables are not touched: a
reader of the old snapshot and one of the new read the same steps and video files; the old
episodes files stay on disk until GC (retention) removes them.

The merged episodes file and the steps and video files its markers name form one file group;
the batch is bounded by `target_file_bytes` of steps and video bytes, so a later full
compaction (`rewrite_groups`), which holds one output group in memory, can still rewrite it:
compaction takes a group of more than one steps or video file as worth merging whatever its
size (`pi_jobs.maintenance.compaction.choose_groups`).

What it is for: a lake grown without hourly compaction (thousands of small groups) opens in
time proportional to its episodes files; a marker merge reads only the episodes table (~0.4 KB
an episode) where a full rewrite copies every steps and video byte (~24 KB an episode).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa

from pi_format.lake._bad_file import UNREADABLE, name_the_bad_file
from pi_format.lake._commit import commit_actions, file_sizes
from pi_format.lake._files import WrittenFile, table_filesystem, write_file
from pi_format.lake.file_groups import FileGroup
from pi_format.lake.layout import LakeLayout
from pi_format.lake.rewrite import (
    _DEFAULT_TARGET_FILE_BYTES,
    RewriteResult,
    _batches,
    _conform_markers,
    _key,
)
from pi_format.lake.tables import ensure_lake_tables


def merge_markers(
    layout: LakeLayout,
    groups: Sequence[FileGroup],
    *,
    target_file_bytes: int = _DEFAULT_TARGET_FILE_BYTES,
    writer_id: str = "compact",
    progress: Callable[[int, int], None] | None = None,
) -> RewriteResult:
    """Merge the episodes files of `groups` into one episodes file per ~`target_file_bytes` of
    the groups' steps and video bytes, in one commit to the episodes table; steps and video
    files are left as they are (see the module docstring).

    Example:
        >>> plan = read_lake_files(layout)
        >>> merge_markers(layout, [g for g in plan.groups if g.size_bytes < 32 << 20]).files_added
        {'episodes': 40}
    """
    import pyarrow.dataset as pads

    started = time.monotonic()
    result = RewriteResult()
    if not groups:
        return result
    if target_file_bytes < 1:
        raise ValueError(f"target_file_bytes must be >= 1, got {target_file_bytes}")
    tables = ensure_lake_tables(layout)
    sizes = file_sizes(tables["episodes"])
    schema = pa.schema(tables["episodes"].schema().to_arrow())
    fs, base = table_filesystem(layout.episodes)
    checked = pads.ParquetFileFormat(
        default_fragment_scan_options=pads.ParquetFragmentScanOptions(page_checksum_verification=True)
    )
    written: list[WrittenFile] = []
    done = 0
    for batch in _batches(groups, target_file_bytes):
        paths = [f"{base}/{p}" for g in batch for p in g.episodes_files]
        try:
            read = pads.dataset(paths, format=checked, schema=schema, filesystem=fs).to_table()
        except UNREADABLE as err:  # a page CRC mismatch or an undecodable page: name the file
            raise name_the_bad_file(
                paths, fs, err, table="episodes", consequence="nothing was committed"
            ) from err
        markers = _conform_markers(read)
        markers = markers.sort_by([("episode_id", "ascending"), ("attempt_id", "ascending")])
        # one marker per pair: a row read twice (a duplicated file) is kept once, as rewrite_groups does
        values = _key(
            markers.column("episode_id").to_pylist(), markers.column("attempt_id").to_pylist()
        ).to_numpy(zero_copy_only=False)
        if len(values):
            markers = markers.filter(pa.array(np.concatenate([[True], values[1:] != values[:-1]])))
            written.append(
                write_file(
                    layout.episodes, markers, [markers.num_rows], writer_id=writer_id, compression="zstd"
                )
            )
        result.markers_kept += markers.num_rows
        done += len(batch)
        if progress is not None:
            progress(done, len(groups))
    old = sorted({p for g in groups for p in g.episodes_files})
    removes = [(p, sizes.get(p)) for p in old if p in sizes]
    if removes or written:
        result.versions["episodes"] = commit_actions(
            tables["episodes"],
            "episodes",
            adds=written,
            removes=removes,
            data_change=False,
            operation="rewrite",
        )
    result.files_removed["episodes"] = len(removes)
    result.files_added["episodes"] = len(written)
    result.bytes_removed["episodes"] = sum(int(s or 0) for _, s in removes)
    result.bytes_added["episodes"] = sum(w.size_bytes for w in written)
    result.groups = len(groups)
    result.seconds = time.monotonic() - started
    return result
