"""The episodes rows of a lake, kept once per host as one memory-mapped Arrow file.

A stream-job lake holds one small episodes file per group commit (2,000 files at 100,000
episodes); reading them all through Parquet costs ~1.5 ms per file at every open. Delta data
files are immutable, so their rows can be kept: a *segment* is one uncompressed Arrow IPC file
holding the projected rows of a set of episodes files, with a `__file` column naming each row's
file (an index into the file list kept in the segment's schema metadata). An open maps the
segment that covers most of the table's current files (zero-copy), drops the rows of files the
table no longer has (compaction, GC), reads only the files added since through Parquet, and
writes a new segment once `REWRITE_AFTER_FILES` files were read that way, so the Parquet work
of an open stays bounded whatever the lake's size. A segment holds the bytes the files hold:
the rows equal reading every file (tests/loader/reading/test_episodes_rows.py).

Segments live beside the host's file indexes (`_host_index.index_directory`). Writes are atomic
(`os.replace` of a temp file); a read-only or full disk only costs the Parquet reads. Only the
`_KEEP_SEGMENTS` newest segments are kept (a process that mapped an older one keeps reading it:
unlinking a mapped file is safe on POSIX).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa

from pi_loader.reading._cache_writes import settle, write_soon

FILE_COLUMN = "__file"  # int32: the row's file, an index into the uris of the open
_FILES_KEY = b"pilake.episodes_files"
_SUFFIX = ".arrow"
# Files read through Parquet by one open before that open writes a new segment covering them.
REWRITE_AFTER_FILES = 16
_KEEP_SEGMENTS = 2
# Newest segments whose file lists an open compares with the table's.
_CANDIDATES = 4

# read_files(indices) -> the rows of files uris[i], projected, with FILE_COLUMN = i
ReadFiles = Callable[[Sequence[int]], pa.Table]


def segment_directory(index_dir: str) -> Path:
    """Where the segments of the lake whose host indexes live in `index_dir` are kept."""
    return Path(index_dir) / "episodes-rows"


def episodes_rows(
    directory: Path | None,
    uris: Sequence[str],
    schema: pa.Schema,
    read_files: ReadFiles,
    complete: Callable[[], bool] | None = None,
) -> pa.Table:
    """Every row of the episodes files `uris`, projected to `schema` plus FILE_COLUMN (in no
    particular order). Without a `directory` every file is read through `read_files`. No
    segment is written when `complete()` says the reads left a file out (a damaged one: its
    rows must not be cached as none).

    Example:
        >>> rows = episodes_rows(segment_directory(index_dir), files.uris, schema, read)
        >>> rows.num_rows == read(range(len(files.uris))).num_rows
        True
    """
    if directory is None or not uris:
        return read_files(range(len(uris)))
    kept, covered = _best_segment(directory, {u: i for i, u in enumerate(uris)}, schema)
    missing = [i for i in range(len(uris)) if i not in covered]
    fresh = read_files(missing) if missing else None
    parts = [t for t in (kept, fresh) if t is not None]
    rows = parts[0] if len(parts) == 1 else pa.concat_tables([p.select(parts[0].column_names) for p in parts])
    if (kept is None or len(missing) >= REWRITE_AFTER_FILES) and (complete is None or complete()):
        # large rows in a thread (`_cache_writes`): the open needs them now, only the next open the file
        listed = list(uris)
        write_soon(directory, rows.get_total_buffer_size(), lambda: _write_segment(directory, listed, rows))
    return rows


def _best_segment(
    directory: Path, position: dict[str, int], schema: pa.Schema
) -> tuple[pa.Table | None, set[int]]:
    """The rows of the segment covering most current files, restricted to those files, with
    FILE_COLUMN renumbered to current indices; and the set of current files it covers."""
    settle(directory)  # this process's segment still being written
    try:
        paths = sorted(directory.glob(f"*{_SUFFIX}"), key=lambda p: p.stat().st_mtime, reverse=True)
    except OSError:
        return None, set()
    want = pa.schema([*schema, pa.field(FILE_COLUMN, pa.int32())])
    best: tuple[int, pa.Table, np.ndarray] | None = None
    for path in paths[:_CANDIDATES]:
        try:
            table = pa.ipc.open_file(pa.memory_map(str(path))).read_all()
            seg_uris = json.loads((table.schema.metadata or {})[_FILES_KEY])
        except (OSError, KeyError, ValueError, pa.ArrowException):
            continue  # being replaced, truncated, or from another version: not a candidate
        if table.schema.remove_metadata() != want:
            continue
        current = np.array([position.get(u, -1) for u in seg_uris], dtype=np.int32)
        hits = int((current >= 0).sum())
        if hits and (best is None or hits > best[0]):
            best = (hits, table, current)
    if best is None:
        return None, set()
    _, table, current = best
    row_files = current[table.column(FILE_COLUMN).to_numpy()]
    keep = row_files >= 0
    if not keep.all():
        table = table.filter(pa.array(keep))
        row_files = row_files[keep]
    table = table.set_column(
        table.schema.get_field_index(FILE_COLUMN), FILE_COLUMN, pa.array(row_files, pa.int32())
    )
    return table.replace_schema_metadata(None), {int(c) for c in current[current >= 0]}


def _write_segment(directory: Path, uris: Sequence[str], rows: pa.Table) -> None:
    target = directory / (hashlib.sha1("\n".join(uris).encode()).hexdigest() + _SUFFIX)
    tmp = None
    try:
        directory.mkdir(parents=True, exist_ok=True)
        if target.exists():
            return
        table = rows.replace_schema_metadata({_FILES_KEY: json.dumps(list(uris)).encode()})
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".segment-", suffix=".tmp")
        with os.fdopen(fd, "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table, max_chunksize=1 << 16)
        os.replace(tmp, target)
        tmp = None
        segments = sorted(directory.glob(f"*{_SUFFIX}"), key=lambda p: p.stat().st_mtime, reverse=True)
        for stale in segments[_KEEP_SEGMENTS:]:
            with contextlib.suppress(OSError):
                stale.unlink()
    except OSError:
        return  # a read-only or full disk: the next open reads Parquet again
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
