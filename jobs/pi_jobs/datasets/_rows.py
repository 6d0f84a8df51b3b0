"""The rows side of a dataset copy: the pin's episodes rows (the commit markers, with their
locators), its annotations and deletions, read from the source and committed at the destination
through the lake-table protocol (`pi_format.lake`: `write_file`, `commit_actions`, the same
bucket application ids as `LakeWriter`'s episodes commits, so a concurrent writer of the same
episodes conflicts instead of duplicating them).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pi_format import LakeLayout
from pi_format.lake import TABLE_SCHEMAS, Pin, commit_actions, pinned_rows, write_file
from pi_format.lake.writer import bucket_app_id

from pi_jobs.datasets._transfer import CopyError


def conform(name: str, rows: pa.Table) -> pa.Table:
    """`rows` in table `name`'s schema: columns in order, types cast, columns an older lake's
    files lack (`pi_format.lake.schemas.ADDED_COLUMNS`) as nulls."""
    schema = TABLE_SCHEMAS[name]
    columns = [
        rows.column(f.name).cast(f.type) if f.name in rows.column_names else pa.nulls(rows.num_rows, f.type)
        for f in schema
    ]
    return pa.Table.from_arrays(columns, schema=schema)


def _table(layout: LakeLayout, name: str) -> Any:
    from deltalake import DeltaTable

    try:
        return DeltaTable(layout.table(name))
    except Exception:  # deltalake's TableNotFoundError: a lake older than this table
        return None


def _rows_of(layout: LakeLayout, name: str, ids: Sequence[str], columns: list[str] | None = None) -> pa.Table:
    table = _table(layout, name)
    if table is None:
        return TABLE_SCHEMAS[name].empty_table() if columns is None else pa.table({c: [] for c in columns})
    rows = table.to_pyarrow_table(columns=columns)
    return rows.filter(pc.is_in(rows.column("episode_id"), value_set=pa.array(list(ids), pa.string())))


def source_rows(layout: LakeLayout, pin: Pin, *, hash_only: bool = False) -> pa.Table:
    """The pin's episodes rows at the source, checked: every pair present, the pin's content hash.
    With `hash_only`, only the columns the content hash covers are read and returned (the read
    back of a copy's committed rows: a third of the bytes).

    Raises:
        CopyError: rows missing or changed (the pin is not intact at the source).
    """
    from pi_format.lake import content_hash
    from pi_format.lake.pins import HASH_COLUMNS

    found = _rows_of(layout, "episodes", pin.episode_ids, list(HASH_COLUMNS) if hash_only else None)
    rows = pinned_rows(found, pin.episode_ids, pin.attempt_ids)
    if rows.num_rows != len(pin.episode_ids) or content_hash(rows) != pin.content_hash:
        raise CopyError(
            f"dataset pin {pin.name!r} is not intact in {layout.root}: {rows.num_rows} of its "
            f"{len(pin.episode_ids)} rows found, content hash "
            f"{content_hash(rows)[:16] if rows.num_rows else '-'} vs the pin's {pin.content_hash[:16]}; "
            f"`pilake dataset show {pin.name}` says what is missing"
        )
    return rows if hash_only else conform("episodes", rows)


def missing_pairs(layout: LakeLayout, rows: pa.Table) -> pa.Table:
    """The rows of `rows` whose (episode_id, attempt_id) the destination's episodes table lacks."""
    ids = rows.column("episode_id").to_pylist()
    have = _rows_of(layout, "episodes", ids, ["episode_id", "attempt_id"])
    there = set(
        zip(have.column("episode_id").to_pylist(), have.column("attempt_id").to_pylist(), strict=True)
    )
    keep = [
        i
        for i, pair in enumerate(zip(ids, rows.column("attempt_id").to_pylist(), strict=True))
        if pair not in there
    ]
    return rows.take(pa.array(keep, pa.int64()))


def extra_rows(source: LakeLayout, dest: LakeLayout, name: str, pin: Pin) -> pa.Table:
    """The `annotations` (written at or before the pin) or `deletions` rows of the pin's episodes
    that the destination lacks (by annotation_id; by (episode_id, deletion_id))."""
    rows = _rows_of(source, name, pin.episode_ids)
    if rows.num_rows == 0:
        return conform(name, rows)
    if name == "annotations":
        rows = rows.filter(pc.less_equal(rows.column("written_at_ns"), pin.created_at_ns))
        keys = ["annotation_id"]
    else:
        keys = ["episode_id", "deletion_id"]
    have = _rows_of(dest, name, pin.episode_ids, keys)
    there = set(zip(*(have.column(k).to_pylist() for k in keys), strict=True))
    mine = list(zip(*(rows.column(k).to_pylist() for k in keys), strict=True))
    seen: set[tuple[Any, ...]] = set()
    keep = []
    for i, key in enumerate(mine):
        if key not in there and key not in seen:
            seen.add(key)
            keep.append(i)
    return conform(name, rows.take(pa.array(keep, pa.int64())))


def commit_rows(
    dest: LakeLayout, tables: dict[str, Any], name: str, rows: pa.Table, *, writer_id: str
) -> int:
    """Write `rows` as one file of table `name` at `dest` and commit it; returns the version."""
    from deltalake.exceptions import CommitFailedError

    written = write_file(dest.table(name), rows, [rows.num_rows], writer_id=writer_id, compression="zstd")
    apps = None
    if name == "episodes":
        stamp = time.time_ns() // 1000
        apps = {bucket_app_id(e): stamp for e in sorted(set(rows.column("episode_id").to_pylist()))}
    try:
        return commit_actions(tables[name], name, adds=[written], app_versions=apps, operation="copy")
    except CommitFailedError as err:
        raise CopyError(
            f"committing {rows.num_rows} {name} rows to {dest.table(name)} conflicted with another writer "
            f"({err}); run the same copy again: it commits only what is still missing"
        ) from err
