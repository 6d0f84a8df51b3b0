"""ClickHouse DDL of the catalog and the Arrow shape of the rows inserted into it.

The index table `episodes_index` is a ReplacingMergeTree keyed by episode_id: recording the same
episode twice (a replayed commit) leaves one row after dedup. Users query the view `episodes`,
which applies FINAL, so they never see a duplicate before a background merge. A rebuild fills a
staging table of the same DDL (`index_ddl(name)`) and exchanges it with the index.
"""

from __future__ import annotations

import time

import pyarrow as pa
from pi_format import EPISODES_SCHEMA
from pi_format.lake.schemas import UNINDEXED_COLUMNS

INDEX_TABLE = "episodes_index"
EPISODES_VIEW = "episodes"
SNAPSHOTS_TABLE = "dataset_snapshots"

# Arrow type -> ClickHouse type for the columns of EPISODES_SCHEMA. Every column is kept: the
# per-episode stats arrays are what a user filters on ("episodes whose gripper ever closed").
_CH_TYPES: dict[pa.DataType, str] = {
    pa.string(): "String",
    pa.int32(): "Int32",
    pa.int64(): "Int64",
    pa.float64(): "Float64",
    pa.bool_(): "Bool",
    pa.list_(pa.string()): "Array(String)",
    pa.list_(pa.float64()): "Array(Float64)",
    pa.list_(pa.float32()): "Array(Float32)",
}


# What the catalog indexes: every episodes column except the locator (where rows are stored is
# the lake's business; a catalog rebuilt from another layout would otherwise disagree) and the
# mergeable statistics (binary sketches and float64 moments, read by pi_loader to merge, never
# filtered on).
INDEXED_FIELDS = tuple(f for f in EPISODES_SCHEMA if f.name not in UNINDEXED_COLUMNS)


def _ch_type(field: pa.Field) -> str:
    for arrow_type, ch_type in _CH_TYPES.items():
        if field.type.equals(arrow_type):
            return ch_type
    raise TypeError(f"no ClickHouse type for episodes column {field.name!r} of type {field.type}")


INDEX_ARROW_SCHEMA = pa.schema(
    [pa.field(f.name, f.type, nullable=False) for f in INDEXED_FIELDS]
    + [
        pa.field("episodes_version", pa.int64(), nullable=False),
        pa.field("indexed_at", pa.timestamp("ms", tz="UTC"), nullable=False),
    ]
)
"""What `record_episodes` inserts: EPISODES_SCHEMA less the locator, plus the Delta version and
the index time."""


def _index_columns() -> str:
    cols = [f"    {f.name} {_ch_type(f)}" for f in INDEXED_FIELDS]
    cols += ["    episodes_version Int64", "    indexed_at DateTime64(3, 'UTC')"]
    return ",\n".join(cols)


# Outdated parts (those a merge replaced) removed in the next cleanup pass, by one thread: see
# `_parts` (part directories on disk stay bounded on chdb).
INDEX_SETTINGS = (
    "cleanup_delay_period = 1, cleanup_delay_period_random_add = 0, "
    "concurrent_part_removal_threshold = 1000000"
)


def index_ddl(table: str = INDEX_TABLE) -> str:
    # The version column makes a newer Delta version win over an older one; among equal
    # versions ClickHouse keeps the last inserted row, which is the same data anyway.
    return (
        f"CREATE TABLE IF NOT EXISTS {table} (\n{_index_columns()}\n) "
        f"ENGINE = ReplacingMergeTree(episodes_version) ORDER BY episode_id SETTINGS {INDEX_SETTINGS}"
    )


_VIEW_QUERY = f"SELECT * FROM {INDEX_TABLE} FINAL"
VIEW_DDL = f"CREATE VIEW IF NOT EXISTS {EPISODES_VIEW} AS {_VIEW_QUERY}"
# A view keeps the columns its table had when it was created: after a rebuild swaps in an index
# with other columns (EPISODES_SCHEMA grew), it is replaced, atomically, in the same step.
VIEW_REPLACE_DDL = f"CREATE OR REPLACE VIEW {EPISODES_VIEW} AS {_VIEW_QUERY}"

# Dataset snapshots (architecture decision 6) are written by a later issue; the table exists now
# so that every catalog has the same shape. Snapshots are immutable, hence a plain MergeTree.
SNAPSHOTS_DDL = (
    f"CREATE TABLE IF NOT EXISTS {SNAPSHOTS_TABLE} (\n"
    "    name String,\n"
    "    created_at DateTime64(3, 'UTC'),\n"
    "    sql String,\n"
    "    table_versions String\n"  # JSON: {"episodes": 12, "steps": 12, "video": 12}
    ") ENGINE = MergeTree ORDER BY (name, created_at)"
)


# When each committed episode was last published (the Kafka timestamp of its latest chunk) and
# when it became readable (its Delta commit and catalog record had both returned): `pilake
# freshness`. Measured, not derived from Delta, so a rebuild of the index keeps it (as it keeps
# snapshots). Written once per episode by the writer that committed it.
FRESHNESS_TABLE = "episode_freshness"
FRESHNESS_DDL = (
    f"CREATE TABLE IF NOT EXISTS {FRESHNESS_TABLE} (\n"
    "    episode_id String,\n"
    "    attempt_id String,\n"
    "    published_at_ns Nullable(Int64),\n"  # null: the source gave no record timestamp
    "    lake_committed_at_ns Int64,\n"  # the Delta commit of the markers returned
    "    readable_at_ns Int64,\n"  # ... and then the catalog record returned
    "    episodes_version Int64\n"
    # cleaned up like the index (one insert per group commit too): see `_parts`
    f") ENGINE = MergeTree ORDER BY (readable_at_ns, episode_id) SETTINGS {INDEX_SETTINGS}"
)
FRESHNESS_ARROW_SCHEMA = pa.schema(
    [
        pa.field("episode_id", pa.string(), nullable=False),
        pa.field("attempt_id", pa.string(), nullable=False),
        pa.field("published_at_ns", pa.int64()),
        pa.field("lake_committed_at_ns", pa.int64(), nullable=False),
        pa.field("readable_at_ns", pa.int64(), nullable=False),
        pa.field("episodes_version", pa.int64(), nullable=False),
    ]
)


def index_rows(rows: pa.Table, episodes_version: int) -> pa.Table:
    """`rows` in EPISODES_SCHEMA as `record_episodes` inserts them (INDEX_ARROW_SCHEMA), or a
    TypeError / ValueError saying what is wrong with them."""
    if not isinstance(rows, pa.Table):
        raise TypeError(f"rows must be a pyarrow.Table in EPISODES_SCHEMA, got {type(rows).__name__}")
    if isinstance(episodes_version, bool) or not isinstance(episodes_version, int) or episodes_version < 0:
        raise ValueError(f"episodes_version must be a Delta version (int >= 0), got {episodes_version!r}")
    missing = [f.name for f in INDEXED_FIELDS if f.name not in rows.column_names]
    if missing:
        raise ValueError(f"rows lack columns of EPISODES_SCHEMA: {missing}; pass episodes rows as written")
    n = rows.num_rows
    arrays: list[pa.Array | pa.ChunkedArray] = []
    for field in INDEX_ARROW_SCHEMA:
        if field.name == "episodes_version":
            arrays.append(pa.array([episodes_version] * n, pa.int64()))
        elif field.name == "indexed_at":
            now_ms = time.time_ns() // 1_000_000
            arrays.append(pa.array([now_ms] * n, pa.int64()).cast(field.type))
        else:
            column = rows.column(field.name)
            if column.null_count:
                raise ValueError(f"column {field.name!r} has {column.null_count} nulls; it must have none")
            try:
                arrays.append(column.cast(field.type))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as err:
                raise ValueError(
                    f"column {field.name!r} of type {column.type} does not cast to {field.type}: {err}"
                ) from err
    return pa.Table.from_arrays(arrays, schema=INDEX_ARROW_SCHEMA)
