"""GC's file-level steps: files no marker names, raw rows of deleted episodes, and the deletion
of data files past their retention (`gc` plans; these carry out)."""

from __future__ import annotations

import contextlib
import time

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pi_format import TABLE_SCHEMAS, LakeLayout
from pi_format.lake import commit_actions, table_filesystem, write_file
from pi_format.lake.file_groups import LakeFiles, read_lake_files
from pi_format.lake.tables import row_group_sizes
from pi_format.lake.tombstones import data_files, deletable, tombstones


def remove_orphan_files(
    layout: LakeLayout, lake: LakeFiles, min_age_s: float, *, dry_run: bool
) -> dict[str, int]:
    """Remove from `steps` and `video` the files no marker names (rows of attempts that never
    committed), once older than `min_age_s`; returns the count per table."""
    from deltalake import DeltaTable

    now_ms = time.time() * 1000
    named = {
        "steps": set(lake.markers.column("steps_file").to_pylist()),
        "video": set(lake.markers.column("video_file").to_pylist()),
    }
    out: dict[str, int] = {}
    for name, referenced in named.items():
        orphans = [
            (path, size)
            for path, size in lake.sizes[name].items()
            if path not in referenced
            and now_ms - lake.modified_ms[name].get(path, now_ms) >= min_age_s * 1000
        ]
        if not orphans:
            continue
        out[name] = len(orphans)
        if not dry_run:
            commit_actions(DeltaTable(layout.table(name)), name, removes=orphans, operation="gc")
    return out


def rewrite_raw(
    layout: LakeLayout, episode_ids: frozenset[str], *, dry_run: bool, writer_id: str
) -> tuple[int, int]:
    """Drop the raw rows of `episode_ids` (deleted, held by no pin), except attempts a quarantine
    row points to; returns (rows dropped, rows kept for quarantine)."""
    from deltalake import DeltaTable

    if not episode_ids:
        return 0, 0
    wanted = pa.array(sorted(episode_ids), pa.string())
    quarantined: set[str] = set()
    try:
        rows = DeltaTable(layout.quarantine).to_pyarrow_table(columns=["episode_id", "attempt_id"])
        rows = rows.filter(pc.is_in(rows.column("episode_id"), value_set=wanted))
        quarantined = set(rows.column("attempt_id").to_pylist())
    except Exception:  # no quarantine table: nothing to keep for it
        quarantined = set()
    table = DeltaTable(layout.raw)
    actions = pa.table(table.get_add_actions(flatten=True))
    names = actions.column_names
    lo = actions.column("min.episode_id").to_pylist() if "min.episode_id" in names else None
    hi = actions.column("max.episode_id").to_pylist() if "max.episode_id" in names else None
    ids = sorted(episode_ids)
    filesystem, base = table_filesystem(layout.raw)
    dropped = kept = 0
    adds, removes = [], []
    for i, path in enumerate(actions.column("path").to_pylist()):
        bounded = lo is not None and hi is not None and lo[i] is not None and hi[i] is not None
        if bounded and not any(lo[i] <= e <= hi[i] for e in ids):  # type: ignore[index]
            continue  # statistics say no deleted episode is in this file
        # pages checked (architecture decision 10): GC never copies damaged raw into a new file
        # whose fresh checksums would vouch for it
        rows = pq.read_table(f"{base}/{path}", filesystem=filesystem, page_checksum_verification=True)
        mine = pc.fill_null(pc.is_in(rows.column("episode_id"), value_set=wanted), False)
        keep_for_quarantine = pc.is_in(
            rows.column("attempt_id"), value_set=pa.array(sorted(quarantined), pa.string())
        )
        drop = pc.and_(mine, pc.invert(keep_for_quarantine))
        n_drop = pc.sum(drop).as_py() or 0
        kept += pc.sum(pc.and_(mine, keep_for_quarantine)).as_py() or 0
        if not n_drop:
            continue
        dropped += n_drop
        removes.append((path, int(actions.column("size_bytes")[i].as_py())))
        rest = rows.filter(pc.invert(drop))
        if rest.num_rows and not dry_run:
            rest = rest.select(TABLE_SCHEMAS["raw"].names).cast(TABLE_SCHEMAS["raw"])
            adds.append(
                write_file(
                    layout.raw,
                    rest,
                    row_group_sizes("raw", rest.num_rows),
                    writer_id=writer_id,
                    compression="zstd",
                )
            )
    if removes and not dry_run:
        commit_actions(table, "raw", adds=adds, removes=removes, operation="gc")
    return dropped, kept


def delete_unneeded_files(
    layout: LakeLayout, retention_s: float, *, dry_run: bool, keep_removed_since_ms: float | None = None
) -> tuple[dict[str, int], dict[str, int], int]:
    """Delete the data files of every lake table that its current version does not hold, no
    marker names and whose retention has passed (`tombstones.deletable`), except those removed
    at or after `keep_removed_since_ms` (a live training run's start); returns (files, bytes)
    per table and the number kept for live runs."""
    from deltalake import DeltaTable

    lake = read_lake_files(layout)
    named = {
        "steps": set(lake.markers.column("steps_file").to_pylist()),
        "video": set(lake.markers.column("video_file").to_pylist()),
    }
    files: dict[str, int] = {}
    sizes: dict[str, int] = {}
    filesystem, _ = table_filesystem(layout.root)
    now_s = time.time()
    kept_for_runs = 0
    for name in TABLE_SCHEMAS:
        try:
            table = DeltaTable(layout.table(name))
        except Exception:  # not in this lake
            continue
        held = set(pa.table(table.get_add_actions(flatten=True)).column("path").to_pylist())
        held |= named.get(name, set())
        removed = tombstones(table)
        _, base = table_filesystem(layout.table(name))
        for file in data_files(layout.table(name)):
            if file.path in held or not deletable(file, removed.get(file.path), retention_s, now_s):
                continue
            removed_at = removed.get(file.path)
            if (
                keep_removed_since_ms is not None
                and removed_at is not None
                and removed_at >= keep_removed_since_ms
            ):
                kept_for_runs += 1  # a live run may read it (pi_jobs.maintenance.live_runs)
                continue
            files[name] = files.get(name, 0) + 1
            sizes[name] = sizes.get(name, 0) + file.size_bytes
            if not dry_run:
                with contextlib.suppress(FileNotFoundError):  # another GC got there first
                    filesystem.delete_file(f"{base}/{file.path}")
    return files, sizes, kept_for_runs
