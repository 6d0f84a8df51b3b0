"""The lake's visibility rule, written once (SPEC.md §7.7, architecture decision 3).

A row of `steps` or `video` is visible only through the `episodes` row with the same
(episode_id, attempt_id): the episodes row is the commit marker, written last (see
`pi_format.lake.writer`). Rows of attempts that never committed are garbage awaiting GC. Should a
re-commit ever leave two episodes rows for one episode, the latest commit wins (ties broken by
attempt_id), so the choice is deterministic for every reader: that is how a backfill's new
attempt supersedes the stream job's. An episode listed in the `deletions` table is not visible
at all, whatever its attempts (`pilake episodes delete`); its rows stay readable by the exact
(episode_id, attempt_id) pairs a dataset pin names (`pinned_rows`) until GC removes them.

The two functions that decide visibility (`latest_commits`, `visible_rows`) are pure Arrow and
take tables the caller already read, so a reader with its own file access (pi_loader reads
files through its cache) applies the same rule; `read_visible` is the convenience that reads
the tables through deltalake for everyone else (operator tools, tests, benchmarks).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pi_format.lake.layout import LakeLayout

# Joins (episode_id, attempt_id) into one key; cannot occur in ids (SPEC.md §1.1).
_KEY_SEP = "\x1f"
# Columns of `episodes` that decide which attempt of an episode is visible.
COMMIT_COLUMNS = ("episode_id", "attempt_id", "committed_at_ns")


def latest_commits(episodes: pa.Table, deleted_ids: pa.Array | Sequence[str] | None = None) -> pa.Table:
    """The visible episodes rows: one per episode_id, sorted by episode_id, none of the episodes
    in `deleted_ids` (the `deletions` table's ids, `read_deleted_ids`).

    `episodes` must hold at least COMMIT_COLUMNS; other columns come along.

    Example:
        >>> latest_commits(episodes_rows).column("episode_id").to_pylist()
        ['r1-000001', 'r1-000002']
    """
    missing = [c for c in COMMIT_COLUMNS if c not in episodes.column_names]
    if missing:
        raise ValueError(
            f"episodes rows need columns {list(COMMIT_COLUMNS)} to decide visibility; missing {missing}"
        )
    if episodes.num_rows == 0:
        return episodes
    # one row per episode, already in id order (a compacted lake read in file order): every row
    # is its episode's only commit, so nothing to sort or take (the sort and the take of the
    # wide table were 2.0 s of an open at 1,000,000 episodes rows)
    sorted_unique = _strictly_increasing(episodes.column("episode_id"))
    winners = episodes if sorted_unique else _winners(episodes)
    if deleted_ids is not None and len(deleted_ids):
        gone = pc.is_in(winners.column("episode_id"), value_set=pa.array(deleted_ids, pa.string()))
        winners = winners.filter(pc.invert(gone))
    return winners


def _strictly_increasing(ids: pa.ChunkedArray | pa.Array) -> bool:
    """Whether every id is greater than the one before it (no nulls): the rows are sorted by id
    and no id repeats."""
    if ids.null_count or len(ids) < 2:
        return not ids.null_count
    later = pc.greater(ids.slice(1), ids.slice(0, len(ids) - 1))
    return bool(pc.all(later).as_py())


def _winners(episodes: pa.Table) -> pa.Table:
    # Order the three key columns only, then take the winning rows once: a wide table (the
    # statistics and locators ride along) is copied a single time.
    order = pc.sort_indices(
        episodes.select(list(COMMIT_COLUMNS)),
        sort_keys=[
            ("episode_id", "ascending"),
            ("committed_at_ns", "descending"),
            ("attempt_id", "descending"),
        ],
    )
    ids = pc.take(episodes.column("episode_id"), order).to_numpy(zero_copy_only=False)
    first = np.concatenate([[True], ids[1:] != ids[:-1]])
    return episodes.take(pc.filter(order, pa.array(first)))


def pinned_rows(episodes: pa.Table, episode_ids: Sequence[str], attempt_ids: Sequence[str]) -> pa.Table:
    """The episodes rows of exactly the (episode_id, attempt_id) pairs a dataset pin names, one
    per pair that `episodes` holds (deleted or superseded attempts included), sorted by
    episode_id. Pairs the rows lack are simply absent: the caller compares counts.

    Example:
        >>> pinned_rows(all_rows, ["r1-000001"], ["5c0f..."]).num_rows
        1
    """
    if len(episode_ids) != len(attempt_ids):
        raise ValueError(f"{len(episode_ids)} episode ids but {len(attempt_ids)} attempt ids")
    if episodes.num_rows == 0 or not len(episode_ids):
        return episodes.slice(0, 0)
    wanted = pc.binary_join_element_wise(
        pa.array(list(episode_ids), pa.string()), pa.array(list(attempt_ids), pa.string()), _KEY_SEP
    )
    rows = episodes.filter(pc.is_in(_keys(episodes), value_set=wanted))
    if rows.num_rows == 0:
        return rows
    # a pair twice (e.g. a file being compacted read in both layouts) counts once
    order = pc.sort_indices(
        rows.select(["episode_id", "attempt_id"]),
        sort_keys=[("episode_id", "ascending"), ("attempt_id", "ascending")],
    )
    rows = rows.take(order)
    keys = _keys(rows)
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks()
    key_values = keys.to_numpy(zero_copy_only=False)
    first = np.concatenate([[True], key_values[1:] != key_values[:-1]])
    return rows.filter(pa.array(first))


def read_deleted_ids(
    layout: LakeLayout, *, version: int | None = None, storage_options: Mapping[str, str] | None = None
) -> pa.Array:
    """The ids of the deleted episodes (the `deletions` table; empty for a lake older than it).

    Example:
        >>> read_deleted_ids(LakeLayout("/data/lake")).to_pylist()
        ['r1-000007']
    """
    try:
        table = _delta_table(layout, "deletions", version, storage_options)
    except Exception:  # deltalake's TableNotFoundError: a lake made before deletions existed
        return pa.array([], pa.string())
    ids = _checked(table, ["episode_id"]).column("episode_id")
    return pc.unique(ids.combine_chunks()) if len(ids) else pa.array([], pa.string())


def _keys(table: pa.Table) -> pa.ChunkedArray | pa.Array:
    return pc.binary_join_element_wise(table.column("episode_id"), table.column("attempt_id"), _KEY_SEP)


def visible_mask(rows: pa.Table, committed: pa.Table) -> pa.ChunkedArray | pa.Array:
    """Per row of `rows` (steps, video, ...): True when its (episode_id, attempt_id) is one of
    `committed`'s pairs (the output of `latest_commits`)."""
    if rows.num_rows == 0:
        return pa.array([], pa.bool_())
    if committed.num_rows == 0:
        return pa.array(np.zeros(rows.num_rows, dtype=bool))
    wanted = _keys(committed)
    if isinstance(wanted, pa.ChunkedArray):
        wanted = wanted.combine_chunks()
    return pc.is_in(_keys(rows), value_set=wanted)


def visible_rows(rows: pa.Table, committed: pa.Table) -> pa.Table:
    """The rows of `rows` that are visible through `committed`, in their original order.

    Example:
        >>> committed = latest_commits(episodes_rows)
        >>> visible_rows(steps_rows, committed).num_rows   # rows of uncommitted attempts dropped
        600
    """
    return rows.filter(visible_mask(rows, committed))


def read_committed(
    layout: LakeLayout,
    columns: Sequence[str] | None = None,
    *,
    version: int | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> pa.Table:
    """The visible episodes rows of the lake (one per episode, sorted by episode_id), read with
    deltalake at `version` (the latest when None).

    Example:
        >>> read_committed(LakeLayout("/data/lake"), ["episode_id", "step_count"]).num_rows
        1200
    """
    wanted = None if columns is None else list(dict.fromkeys([*COMMIT_COLUMNS, *columns]))
    table = _checked(_delta_table(layout, "episodes", version, storage_options), wanted)
    committed = latest_commits(table, read_deleted_ids(layout, storage_options=storage_options))
    return committed if columns is None else committed.select(list(dict.fromkeys(["episode_id", *columns])))


def read_visible(
    layout: LakeLayout,
    name: str,
    columns: Sequence[str] | None = None,
    *,
    versions: Mapping[str, int] | None = None,
    filters: Any = None,
    storage_options: Mapping[str, str] | None = None,
) -> pa.Table:
    """The visible rows of table `name` (`steps`, `video`, ...) at the pinned `versions` of it and
    of `episodes` (the latest when None). `filters` is a pyarrow.compute expression applied while
    reading.

    Example:
        >>> steps = read_visible(LakeLayout("/data/lake"), "steps", ["episode_id", "step_index"])
    """
    versions = versions or {}
    episodes = _delta_table(layout, "episodes", versions.get("episodes"), storage_options)
    committed = latest_commits(
        _checked(episodes, list(COMMIT_COLUMNS)), read_deleted_ids(layout, storage_options=storage_options)
    )
    wanted = None if columns is None else list(dict.fromkeys([*columns, "episode_id", "attempt_id"]))
    rows = _checked(_delta_table(layout, name, versions.get(name), storage_options), wanted, filters)
    visible = visible_rows(rows, committed)
    return visible if columns is None else visible.select(list(columns))


def _checked(table: Any, columns: list[str] | None, filters: Any = None) -> pa.Table:
    """`table.to_pyarrow_table(columns=..., filters=...)` (deltalake's own read, the same
    dataset) with every Parquet page's CRC checked (SPEC.md §7.14): a damaged page raises
    OSError naming the CRC, never different rows."""
    import pyarrow.dataset as pads
    from pyarrow.parquet import filters_to_expression

    expression = None if filters is None else filters_to_expression(filters)
    options = pads.ParquetFragmentScanOptions(page_checksum_verification=True)
    result: pa.Table = table.to_pyarrow_dataset().to_table(
        columns=columns, filter=expression, fragment_scan_options=options
    )
    return result


def _delta_table(
    layout: LakeLayout, name: str, version: int | None, storage_options: Mapping[str, str] | None
) -> Any:
    from deltalake import DeltaTable

    options = dict(storage_options) if storage_options else None
    return DeltaTable(layout.table(name), version=version, storage_options=options)
