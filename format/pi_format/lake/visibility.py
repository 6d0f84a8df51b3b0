"""The lake's visibility rule, written once (SPEC.md §7.7, architecture decision 3).

A row of `steps` or `video` is visible only through the `episodes` row with the same
(episode_id, attempt_id): the episodes row is the commit marker, written last (see
`pi_format.lake.writer`). Rows of attempts that never committed are garbage awaiting GC. Should a
re-commit ever leave two episodes rows for one episode, the latest commit wins (ties broken by
attempt_id), so the choice is deterministic for every reader.

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


def latest_commits(episodes: pa.Table) -> pa.Table:
    """The visible episodes rows: one per episode_id, sorted by episode_id.

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
    table = _delta_table(layout, "episodes", version, storage_options).to_pyarrow_table(columns=wanted)
    committed = latest_commits(table)
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
    committed = latest_commits(
        _delta_table(layout, "episodes", versions.get("episodes"), storage_options).to_pyarrow_table(
            columns=list(COMMIT_COLUMNS)
        )
    )
    wanted = None if columns is None else list(dict.fromkeys([*columns, "episode_id", "attempt_id"]))
    rows = _delta_table(layout, name, versions.get(name), storage_options).to_pyarrow_table(
        columns=wanted, filters=filters
    )
    visible = visible_rows(rows, committed)
    return visible if columns is None else visible.select(list(columns))


def _delta_table(
    layout: LakeLayout, name: str, version: int | None, storage_options: Mapping[str, str] | None
) -> Any:
    from deltalake import DeltaTable

    options = dict(storage_options) if storage_options else None
    return DeltaTable(layout.table(name), version=version, storage_options=options)
