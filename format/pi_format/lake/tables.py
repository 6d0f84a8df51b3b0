"""The lake's Delta tables as a writer finds them: created once with the properties chosen
for them (SPEC.md §7.8), older `episodes` tables given the columns added since, and the Parquet
and post-commit settings every append uses. `LakeWriter` (`writer`) commits through these.
"""

from __future__ import annotations

import functools
from typing import Any

import pyarrow as pa

from pi_format.lake._files import DATA_SKIPPING_COLUMNS, DICT_COLUMNS, group_sizes
from pi_format.lake.integrity import TABLE_DESCRIPTION
from pi_format.lake.layout import LakeLayout
from pi_format.lake.schemas import ADDED_COLUMNS, TABLE_SCHEMAS

# Rows per Parquet row group of the tables written through delta-rs (raw, quarantine): small
# groups keep one message's read small. steps and video are laid out by `_files` instead.
_ROW_GROUP_ROWS = {
    "steps": 1024,
    "video": 64,
    "raw": 64,
    "episodes": 1024,
    "quarantine": 1024,
    "quarantine_releases": 1024,
    "deletions": 1024,
    "pins": 1,
    "annotations": 4096,
}


def row_group_sizes(name: str, num_rows: int) -> list[int]:
    """Row group sizes of a `num_rows`-row append to lake table `name` (raw, quarantine) written
    by `LakeWriter` itself: groups of the table's row-group size, the last one shorter.

    Example:
        >>> row_group_sizes("raw", 150)
        [64, 64, 22]
    """
    if name not in _ROW_GROUP_ROWS:
        raise ValueError(f"unknown lake table {name!r}; expected one of {sorted(_ROW_GROUP_ROWS)}")
    return group_sizes(num_rows, _ROW_GROUP_ROWS[name])


# Dictionary encoding only on DICT_COLUMNS (repeated strings): dictionary-encoded floats make
# proprio files larger than raw (0.77x). delta-rs ignores column_properties on nested leaves,
# hence the default-off + per-column-on shape in `table_writer_properties`.

# Table properties of a new lake, chosen on purpose (SPEC.md §7.8):
# - a checkpoint every 25 commits: delta-rs 1.x rebuilds a table's snapshot from its last
#   checkpoint plus every JSON commit since, at each snapshot update and each commit (measured:
#   1 ms at the 1st commit after a checkpoint, 9 ms at the 99th, per call; a group commit makes
#   7 such calls), while a checkpoint rewrites the whole table state (10-30 ms at 400 files).
#   Measured on group commits of 50 episodes to 20,000 episodes: 25 -> 31-38 ms of Delta work per
#   group, 100 -> 67-70 ms; the same interval bounds what a reader replays at open;
# - log entries kept 7 days: a long retention keeps millions of JSON files in _delta_log at one
#   commit per second (listing them gets slow); pinned datasets do not rely on time travel;
# - statistics of episode_id and attempt_id only, declared: the writer's own files carry no
#   others (a checkpoint holds every file's statistics), and delta-rs prunes files on a filter
#   over an undeclared column without statistics as if it had no values.
TABLE_CONFIGURATION = {
    "delta.checkpointInterval": "25",
    "delta.logRetentionDuration": "interval 7 days",
    "delta.dataSkippingStatsColumns": ",".join(DATA_SKIPPING_COLUMNS),
}


def table_writer_properties(name: str) -> Any:
    """The Parquet settings for writing lake table `name` through delta-rs (a
    `deltalake.WriterProperties`; appends, `optimize.compact`): small row groups, zstd,
    dictionary encoding only on repeated strings.

    Example:
        >>> write_deltalake(layout.table("raw"), rows, writer_properties=table_writer_properties("raw"))
    """
    from deltalake import ColumnProperties, WriterProperties

    if name not in _ROW_GROUP_ROWS:
        raise ValueError(f"unknown lake table {name!r}; expected one of {sorted(_ROW_GROUP_ROWS)}")
    names = TABLE_SCHEMAS[name].names
    return WriterProperties(
        max_row_group_size=_ROW_GROUP_ROWS[name],
        # as LakeWriter's own files (zstd): delta-rs writes uncompressed by default, and a raw
        # table bin-packed by `pilake compact` came out 1.6x larger (benchmarks/lifecycle)
        compression="ZSTD",
        default_column_properties=ColumnProperties(dictionary_enabled=False),
        column_properties={c: ColumnProperties(dictionary_enabled=True) for c in DICT_COLUMNS if c in names},
    )


def ensure_lake_tables(layout: LakeLayout) -> dict[str, Any]:
    """Create the lake's tables that are missing (with TABLE_CONFIGURATION) and give an
    `episodes` or `video` table made before some of its nullable columns (the locator, the
    mergeable statistics, the video chunks' checksum: `ADDED_COLUMNS`) those columns; returns
    every table, opened. Run it once before starting parallel writers: table creation and
    schema changes are metadata commits, and a writer whose first append races one fails with
    "Metadata changed since last commit".

    Example:
        >>> ensure_lake_tables(LakeLayout("/data/lake"))["episodes"].version()
        0
    """
    from deltalake import DeltaTable, Field

    tables: dict[str, Any] = {}
    for name, schema in TABLE_SCHEMAS.items():
        # mode="ignore": create when missing, open as-is otherwise
        tables[name] = DeltaTable.create(
            layout.table(name),
            schema=schema,
            mode="ignore",
            configuration=TABLE_CONFIGURATION,
            # every data file of a table made now carries page CRCs, recorded in its Delta
            # metadata (pi_format.lake.integrity.PAGE_CHECKSUMS_PROPERTY)
            description=TABLE_DESCRIPTION,
        )
    for name, table in tables.items():
        _declare_stats_columns(name, table)
    for name, added in ADDED_COLUMNS.items():
        table = tables[name]
        have = set(pa.schema(table.schema().to_arrow()).names)
        missing = [f for f in TABLE_SCHEMAS[name] if f.name in added and f.name not in have]
        if missing:
            table.alter.add_columns([Field.from_arrow(f) for f in missing])
    return tables


def _declare_stats_columns(name: str, table: Any) -> None:
    """Give a table made before `delta.dataSkippingStatsColumns` was set (lakes written before
    2026-11-24) that property: its files carry statistics of those columns only, and without it
    filters through delta-rs on any other column return no rows. Another writer opening the
    same lake may set it first."""
    from deltalake.exceptions import CommitFailedError

    key = "delta.dataSkippingStatsColumns"
    wanted = TABLE_CONFIGURATION[key]
    if table.metadata().configuration.get(key) == wanted:
        return
    try:
        table.alter.set_table_properties({key: wanted})
    except CommitFailedError:
        table.update_incremental()
        if table.metadata().configuration.get(key) != wanted:
            raise
    table.update_incremental()


@functools.cache
def post_commit_hooks() -> Any:
    """A checkpoint every checkpointInterval commits, but no expired-log cleanup per commit: it
    lists the whole _delta_log each time (measured: 20 of 40 ms per commit at 1,700 commits,
    growing with the log); maintenance (`pilake gc`, issue 12) cleans expired logs."""
    from deltalake.transaction import PostCommitHookProperties

    return PostCommitHookProperties(create_checkpoint=True, cleanup_expired_logs=False)
