"""The lake-table protocol: table names and layout, schemas, Parquet settings, the commit order
and the visible-rows rule. Written once here and used by every writer (stream job, quarantine
release, backfill, benchmarks) and every reader (pi_loader, operator tools, the catalog's
rebuild).

Why in pi_format: the lake's tables are pi-lake's columnar format, the storage half of the same
contract the wire protocol is for transport; pi_format is the one package every writer and
reader already depends on, and it imports no other pi package (SPEC.md §7).
"""

from pi_format.errors import ChecksumError
from pi_format.lake._commit import commit_actions
from pi_format.lake._files import STEPS_ROW_GROUP_STEPS, WrittenFile, table_filesystem, write_file
from pi_format.lake.annotations import (
    ANNOTATION_KINDS,
    Annotation,
    AnnotationStore,
    current_annotations,
    drop_episode_annotations,
    value_at,
)
from pi_format.lake.integrity import (
    CHUNK_CRC_COLUMN,
    PAGE_CHECKSUMS_PROPERTY,
    FileCheck,
    PageFault,
    check_chunk_crcs,
    check_parquet_file,
    checksums_required,
    chunk_crc32,
    with_chunk_crcs,
)
from pi_format.lake.layout import LakeLayout
from pi_format.lake.pins import Pin, PinStore, PinSummary, content_hash
from pi_format.lake.schemas import (
    ANNOTATIONS_SCHEMA,
    DELETIONS_SCHEMA,
    EPISODES_SCHEMA,
    LINEAGE_COLUMNS,
    LOCATOR_COLUMNS,
    NORM_STATS_COLUMNS,
    PINS_SCHEMA,
    QUARANTINE_RELEASES_SCHEMA,
    QUARANTINE_SCHEMA,
    RAW_SCHEMA,
    STEPS_SCHEMA,
    TABLE_SCHEMAS,
    UNINDEXED_COLUMNS,
    VIDEO_SCHEMA,
)
from pi_format.lake.tables import TABLE_CONFIGURATION, ensure_lake_tables, table_writer_properties
from pi_format.lake.visibility import (
    COMMIT_COLUMNS,
    latest_commits,
    pinned_rows,
    read_committed,
    read_deleted_ids,
    read_visible,
    visible_mask,
    visible_rows,
)
from pi_format.lake.writer import (
    STAGE_COMMITTED,
    STAGE_ROWS_WRITTEN,
    TXN_BUCKETS,
    EpisodeRows,
    GroupCommit,
    LakeWriter,
    bucket_app_id,
    writer_app_id,
)

__all__ = [
    "ANNOTATIONS_SCHEMA",
    "ANNOTATION_KINDS",
    "CHUNK_CRC_COLUMN",
    "COMMIT_COLUMNS",
    "DELETIONS_SCHEMA",
    "EPISODES_SCHEMA",
    "LINEAGE_COLUMNS",
    "LOCATOR_COLUMNS",
    "NORM_STATS_COLUMNS",
    "PAGE_CHECKSUMS_PROPERTY",
    "PINS_SCHEMA",
    "QUARANTINE_RELEASES_SCHEMA",
    "QUARANTINE_SCHEMA",
    "RAW_SCHEMA",
    "STAGE_COMMITTED",
    "STAGE_ROWS_WRITTEN",
    "STEPS_ROW_GROUP_STEPS",
    "STEPS_SCHEMA",
    "TABLE_CONFIGURATION",
    "TABLE_SCHEMAS",
    "TXN_BUCKETS",
    "UNINDEXED_COLUMNS",
    "VIDEO_SCHEMA",
    "Annotation",
    "AnnotationStore",
    "ChecksumError",
    "EpisodeRows",
    "FileCheck",
    "GroupCommit",
    "LakeLayout",
    "LakeWriter",
    "PageFault",
    "Pin",
    "PinStore",
    "PinSummary",
    "WrittenFile",
    "bucket_app_id",
    "check_chunk_crcs",
    "check_parquet_file",
    "checksums_required",
    "chunk_crc32",
    "commit_actions",
    "content_hash",
    "current_annotations",
    "drop_episode_annotations",
    "ensure_lake_tables",
    "latest_commits",
    "pinned_rows",
    "read_committed",
    "read_deleted_ids",
    "read_visible",
    "table_filesystem",
    "table_writer_properties",
    "value_at",
    "visible_mask",
    "visible_rows",
    "with_chunk_crcs",
    "write_file",
    "writer_app_id",
]
