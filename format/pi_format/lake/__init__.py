"""The lake-table protocol: table names and layout, schemas, Parquet settings, the commit order
and the visible-rows rule. Written once here and used by every writer (stream job, quarantine
release, backfill, benchmarks) and every reader (pi_loader, operator tools, the catalog's
rebuild).

Why in pi_format: the lake's tables are pi-lake's columnar format, the storage half of the same
contract the wire protocol is for transport; pi_format is the one package every writer and
reader already depends on, and it imports no other pi package (SPEC.md §7).
"""

from pi_format.lake.layout import LakeLayout
from pi_format.lake.schemas import (
    EPISODES_SCHEMA,
    QUARANTINE_RELEASES_SCHEMA,
    QUARANTINE_SCHEMA,
    RAW_SCHEMA,
    STEPS_SCHEMA,
    TABLE_SCHEMAS,
    VIDEO_SCHEMA,
)
from pi_format.lake.visibility import (
    COMMIT_COLUMNS,
    latest_commits,
    read_committed,
    read_visible,
    visible_mask,
    visible_rows,
)
from pi_format.lake.writer import (
    EPISODE_TXN_VERSION,
    EpisodeRows,
    LakeWriter,
    episode_app_id,
    table_writer_properties,
)

__all__ = [
    "COMMIT_COLUMNS",
    "EPISODES_SCHEMA",
    "EPISODE_TXN_VERSION",
    "QUARANTINE_RELEASES_SCHEMA",
    "QUARANTINE_SCHEMA",
    "RAW_SCHEMA",
    "STEPS_SCHEMA",
    "TABLE_SCHEMAS",
    "VIDEO_SCHEMA",
    "EpisodeRows",
    "LakeLayout",
    "LakeWriter",
    "episode_app_id",
    "latest_commits",
    "read_committed",
    "read_visible",
    "table_writer_properties",
    "visible_mask",
    "visible_rows",
]
