"""Which data files under a table's directory the table no longer needs, and since when.

Delta keeps a *tombstone* (a `remove` action with its `deletionTimestamp`) for every file a
commit removed; a file no version of the log ever added (a writer that died before its commit,
or one still writing) has none. GC (`pilake gc`) deletes a file once the table's current version
no longer holds it, no marker's locator names it (a rewrite between its first and last commit),
and it has been unneeded for the retention: measured from its tombstone when it has one, from
its own modification time otherwise, and never sooner than `IN_FLIGHT_GRACE_S` for a file that
was never committed (a writer may be about to commit it).

Tombstones are read from the last checkpoint (delta-rs keeps unexpired ones there) and the JSON
commits after it: bounded by the checkpoint interval, not by the log's length. A tombstone
expires after `delta.deletedFileRetentionDuration` (7 days by default); a retention longer than
that is measured from the file's own modification time once its tombstone is gone, which is
earlier than its removal: keep GC retentions under a week.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from pi_format.lake._files import table_filesystem

# A never-committed file younger than this may belong to a writer that is about to commit it: a
# group commit takes well under a second from its first file to its markers; ten minutes also
# covers a stalled writer (a long GC pause, a slow object store).
IN_FLIGHT_GRACE_S = 600.0


@dataclass(frozen=True, slots=True)
class DiskFile:
    """A Parquet data file under a table's directory."""

    path: str  # relative to the table root, as the Delta log names it
    size_bytes: int
    modified_s: float  # modification time, seconds since the epoch


def data_files(table_uri: str) -> list[DiskFile]:
    """Every `*.parquet` data file under the table (not `_delta_log`), recursively."""
    from pyarrow import fs as pafs

    filesystem, base = table_filesystem(table_uri)
    selector = pafs.FileSelector(base, recursive=True, allow_not_found=True)
    out = []
    for info in filesystem.get_file_info(selector):
        if info.type != pafs.FileType.File or not info.path.endswith(".parquet"):
            continue
        relative = info.path[len(base) :].lstrip("/")
        if relative.startswith("_delta_log") or relative.split("/")[-1].startswith(("_", ".")):
            continue
        modified = info.mtime.timestamp() if info.mtime is not None else 0.0
        out.append(DiskFile(relative, int(info.size or 0), modified))
    return out


def tombstones(table: Any) -> dict[str, int]:
    """Path -> deletionTimestamp (ms) of the files the log of `table` (a deltalake.DeltaTable)
    still remembers removing."""
    from urllib.parse import unquote

    import pyarrow.parquet as pq

    filesystem, base = table_filesystem(str(table.table_uri).rstrip("/").removeprefix("file://"))
    log_dir = f"{base}/_delta_log"
    removed: dict[str, int] = {}
    start = 0
    try:
        with filesystem.open_input_stream(f"{log_dir}/_last_checkpoint") as stream:
            last = json.loads(stream.read().decode())
        checkpoint = int(last["version"])
        parts = int(last.get("parts") or 1)
        names = (
            [f"{checkpoint:020d}.checkpoint.parquet"]
            if parts == 1
            else [f"{checkpoint:020d}.checkpoint.{i:010d}.{parts:010d}.parquet" for i in range(1, parts + 1)]
        )
        for name in names:
            rows = pq.read_table(f"{log_dir}/{name}", columns=["remove"], filesystem=filesystem).column(
                "remove"
            )
            for value in rows.to_pylist():
                if value and value.get("path"):
                    removed[unquote(value["path"])] = int(value.get("deletionTimestamp") or 0)
        start = checkpoint + 1
    except (FileNotFoundError, KeyError, ValueError, pa.ArrowInvalid):
        start = 0
    version = int(table.version())
    for v in range(start, version + 1):
        try:
            with filesystem.open_input_stream(f"{log_dir}/{v:020d}.json") as stream:
                lines = stream.read().decode().splitlines()
        except (FileNotFoundError, OSError):
            continue  # cleaned up (older than the log retention): its files are old too
        for line in lines:
            if '"remove"' not in line:
                continue
            action = json.loads(line).get("remove") or {}
            if action.get("path"):
                removed[unquote(action["path"])] = int(action.get("deletionTimestamp") or 0)
    return removed


def deletable(
    file: DiskFile,
    removed_at_ms: int | None,
    retention_s: float,
    now_s: float | None = None,
) -> bool:
    """Whether an unreferenced `file` is past its retention (see the module docstring)."""
    now_s = time.time() if now_s is None else now_s
    if removed_at_ms is not None:
        return now_s - removed_at_ms / 1000.0 >= retention_s
    return now_s - file.modified_s >= max(retention_s, IN_FLIGHT_GRACE_S)
