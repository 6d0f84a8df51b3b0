"""When GC may delete a file (`pi_format.lake.tombstones`): a tombstone's age for removed files,
at least the in-flight grace for files no commit ever added; tombstones outlive checkpoints."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pyarrow as pa
from pi_format import TABLE_SCHEMAS, LakeLayout
from pi_format.lake import commit_actions, ensure_lake_tables, write_file
from pi_format.lake.tombstones import IN_FLIGHT_GRACE_S, DiskFile, data_files, deletable, tombstones


def _row() -> pa.Table:
    return pa.table(
        {
            "episode_id": ["e"],
            "deletion_id": ["d"],
            "reason": ["r"],
            "selection": ["s"],
            "deleted_at_ns": pa.array([1], pa.int64()),
        },
        schema=TABLE_SCHEMAS["deletions"],
    )


def test_tombstones_survive_a_checkpoint_and_list_only_removed_files(tmp_path: Path) -> None:
    layout = LakeLayout(str(tmp_path / "lake"))
    table = ensure_lake_tables(layout)["deletions"]
    kept = write_file(layout.deletions, _row(), [1], writer_id="kept", compression="zstd")
    gone = write_file(layout.deletions, _row(), [1], writer_id="gone", compression="zstd")
    stray = write_file(layout.deletions, _row(), [1], writer_id="stray", compression="zstd")  # never added
    commit_actions(table, "deletions", adds=[kept, gone])
    before_ms = time.time() * 1000
    commit_actions(table, "deletions", removes=[(gone.relative_path, gone.size_bytes)])
    table.create_checkpoint()
    commit_actions(
        table,
        "deletions",
        adds=[write_file(layout.deletions, _row(), [1], writer_id="x", compression="zstd")],
    )
    removed = tombstones(table)
    assert set(removed) == {gone.relative_path} and removed[gone.relative_path] >= before_ms - 1000
    on_disk = {f.path for f in data_files(layout.deletions)}
    assert {kept.relative_path, gone.relative_path, stray.relative_path} <= on_disk
    assert not any(p.startswith("_delta_log") for p in on_disk)
    assert os.path.exists(Path(layout.deletions) / "_delta_log" / "_last_checkpoint")


def test_deletable_measures_removed_files_from_their_tombstone_and_others_from_the_grace() -> None:
    now = 1_000_000.0
    old_file = DiskFile("a.parquet", 10, modified_s=now - 10 * 86400)
    # removed a minute ago: kept for a 1-hour retention even though the file itself is old
    assert not deletable(old_file, removed_at_ms=int((now - 60) * 1000), retention_s=3600, now_s=now)
    assert deletable(old_file, removed_at_ms=int((now - 60) * 1000), retention_s=0, now_s=now)
    # never committed (no tombstone): a writer may be about to commit it
    young = DiskFile("b.parquet", 10, modified_s=now - 60)
    assert not deletable(young, None, retention_s=0, now_s=now)
    assert deletable(DiskFile("c.parquet", 10, modified_s=now - IN_FLIGHT_GRACE_S - 1), None, 0, now_s=now)
    assert not deletable(DiskFile("d.parquet", 10, modified_s=now - 7200), None, retention_s=86400, now_s=now)
