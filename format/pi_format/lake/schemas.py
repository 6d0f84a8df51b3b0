"""Arrow schemas of the Delta tables of the lake (see SPEC.md, "Tables").

Visibility rule (architecture decision 3): a row of `steps` or `video` is visible only when an
`episodes` row with the same (episode_id, attempt_id) exists. The episodes row is written last
and is the commit marker; rows of attempts that never committed are garbage for GC.
"""

from __future__ import annotations

import pyarrow as pa

f32_list = pa.list_(pa.float32())
f64_list = pa.list_(pa.float64())

RAW_SCHEMA = pa.schema(
    [
        pa.field("episode_id", pa.string()),  # the Kafka key; null when the key was missing
        pa.field("chunk_index", pa.int32()),  # null when the message did not decode
        pa.field("kafka_topic", pa.string(), nullable=False),
        pa.field("kafka_partition", pa.int32(), nullable=False),
        pa.field("kafka_offset", pa.int64(), nullable=False),
        pa.field("received_at_ns", pa.int64(), nullable=False),
        pa.field("attempt_id", pa.string(), nullable=False),
        pa.field("message", pa.binary(), nullable=False),  # the value exactly as received
    ]
)

EPISODES_SCHEMA = pa.schema(
    [
        pa.field("episode_id", pa.string(), nullable=False),
        pa.field("attempt_id", pa.string(), nullable=False),
        pa.field("robot_id", pa.string(), nullable=False),
        pa.field("robot_type", pa.string(), nullable=False),
        pa.field("task", pa.string(), nullable=False),
        pa.field("start_time_ns", pa.int64(), nullable=False),
        pa.field("control_rate_hz", pa.float64(), nullable=False),
        pa.field("success", pa.bool_(), nullable=False),
        pa.field("tags", pa.list_(pa.string()), nullable=False),
        pa.field("step_count", pa.int32(), nullable=False),
        pa.field("duration_s", pa.float64(), nullable=False),
        pa.field("proprio_dim", pa.int32(), nullable=False),
        pa.field("action_dim", pa.int32(), nullable=False),
        pa.field("cameras", pa.list_(pa.string()), nullable=False),
        pa.field("camera_fps", pa.list_(pa.float64()), nullable=False),
        pa.field("video_width", pa.int32(), nullable=False),
        pa.field("video_height", pa.int32(), nullable=False),
        pa.field("video_chunk_frames", pa.int32(), nullable=False),
        pa.field("proprio_mean", f32_list, nullable=False),
        pa.field("proprio_std", f32_list, nullable=False),
        pa.field("proprio_min", f32_list, nullable=False),
        pa.field("proprio_max", f32_list, nullable=False),
        pa.field("action_mean", f32_list, nullable=False),
        pa.field("action_std", f32_list, nullable=False),
        pa.field("action_min", f32_list, nullable=False),
        pa.field("action_max", f32_list, nullable=False),
        pa.field("raw_size_bytes", pa.int64(), nullable=False),
        pa.field("received_at_ns", pa.int64(), nullable=False),  # the manifest's arrival
        pa.field("committed_at_ns", pa.int64(), nullable=False),
        # The locator (SPEC.md §7.8), filled by LakeWriter: where this attempt's rows are, so a
        # reader goes straight to them instead of scanning. Paths are relative to the table root
        # (as in the Delta log); null only in rows written before locators existed.
        pa.field("steps_file", pa.string()),
        # the first of the episode's steps row groups (step_index order; each holds as many steps
        # as this first one, the last one fewer): step t is in row group this + t // its rows
        pa.field("steps_row_group", pa.int32()),
        pa.field("video_file", pa.string()),
        # per camera (in `cameras` order) the row group of its chunk 0; chunk c is that + c,
        # one video row per row group
        pa.field("video_row_groups", pa.list_(pa.int32())),
        # Statistics that merge over any selection without reading a step (pi_format.stats):
        # float64 mean and M2 = Σ(x − mean)² per dimension (merge exactly) and a quantile sketch
        # (merges with a bounded rank error); null in rows written before they existed.
        pa.field("proprio_mean64", f64_list),
        pa.field("proprio_m2", f64_list),
        pa.field("proprio_sketch", pa.binary()),
        pa.field("action_mean64", f64_list),
        pa.field("action_m2", f64_list),
        pa.field("action_sketch", pa.binary()),
        # Lineage: "<name>@<version>" of the featurizer that made this attempt (a backfill's,
        # `pilake backfill`); null for the stream job's own featurizer (and rows before backfills).
        pa.field("featurizer", pa.string()),
    ]
)

# The columns of EPISODES_SCHEMA that say where rows are stored, not what an episode is: the
# catalog does not index them, featurizers leave them null and LakeWriter fills them.
LOCATOR_COLUMNS = ("steps_file", "steps_row_group", "video_file", "video_row_groups")
# The mergeable statistics (pi_format.stats): read to merge, never filtered on, so the catalog
# does not index them either (a sketch is ~2 kB of binary per feature).
NORM_STATS_COLUMNS = (
    "proprio_mean64",
    "proprio_m2",
    "proprio_sketch",
    "action_mean64",
    "action_m2",
    "action_sketch",
)
# Where an attempt came from (a backfill's featurizer); the catalog records backfills apart.
LINEAGE_COLUMNS = ("featurizer",)
# Every episodes column the catalog leaves out; all of them nullable (added after the first
# lakes were written: `ensure_lake_tables` adds them to an older table).
UNINDEXED_COLUMNS = LOCATOR_COLUMNS + NORM_STATS_COLUMNS + LINEAGE_COLUMNS
# Nullable columns added to tables after lakes were written (`ensure_lake_tables` adds them to
# an older table; readers take a file without them as holding nulls).
ADDED_COLUMNS: dict[str, tuple[str, ...]] = {
    "episodes": UNINDEXED_COLUMNS,
    "video": ("chunk_crc32",),
}

STEPS_SCHEMA = pa.schema(
    [
        pa.field("episode_id", pa.string(), nullable=False),
        pa.field("attempt_id", pa.string(), nullable=False),
        pa.field("step_index", pa.int32(), nullable=False),
        pa.field("timestamp_ns", pa.int64(), nullable=False),
        pa.field("proprio", f32_list, nullable=False),
        pa.field("action", f32_list, nullable=False),
        # per camera, in the order of episodes.cameras: the frame shown at this step (the
        # latest frame whose timestamp is <= the step's timestamp, or frame 0 before the first)
        pa.field("camera_frame_index", pa.list_(pa.int32()), nullable=False),
    ]
)

VIDEO_SCHEMA = pa.schema(
    [
        pa.field("episode_id", pa.string(), nullable=False),
        pa.field("attempt_id", pa.string(), nullable=False),
        pa.field("camera", pa.string(), nullable=False),
        pa.field("chunk_index", pa.int32(), nullable=False),
        pa.field("first_frame", pa.int32(), nullable=False),
        pa.field("frame_count", pa.int32(), nullable=False),
        pa.field("frame_timestamps_ns", pa.list_(pa.int64()), nullable=False),
        pa.field("codec", pa.string(), nullable=False),  # "h264" Annex-B, IDR first
        pa.field("width", pa.int32(), nullable=False),
        pa.field("height", pa.int32(), nullable=False),
        pa.field("data", pa.binary(), nullable=False),
        # CRC-32 (zlib) of `data`, set where the chunk is encoded and checked before it is
        # decoded (pi_format.lake.integrity); null in rows written before it existed (2026-11-26):
        # such chunks are "unverifiable", never "ok"
        pa.field("chunk_crc32", pa.int64()),
    ]
)

QUARANTINE_SCHEMA = pa.schema(
    [
        pa.field("quarantine_id", pa.string(), nullable=False),
        pa.field("episode_id", pa.string()),  # null when no id could be read
        pa.field("reason", pa.string(), nullable=False),  # a pi_format.QuarantineReason value
        pa.field("details", pa.string(), nullable=False),
        pa.field("kafka_topic", pa.string(), nullable=False),
        pa.field("kafka_partition", pa.int32(), nullable=False),
        pa.field("kafka_offsets", pa.list_(pa.int64()), nullable=False),
        # where the bytes are kept: rows of the raw table with this attempt_id and offsets
        pa.field("raw_pointer", pa.string(), nullable=False),
        pa.field("size_bytes", pa.int64(), nullable=False),
        pa.field("attempt_id", pa.string(), nullable=False),
        pa.field("quarantined_at_ns", pa.int64(), nullable=False),
    ]
)

# One row per operator release of a quarantined episode (`pilake quarantine release`). The
# quarantine table stays append-only; whether a quarantine row is still open is derived from
# this table and from `episodes` (SPEC.md section 7.6).
QUARANTINE_RELEASES_SCHEMA = pa.schema(
    [
        pa.field("release_id", pa.string(), nullable=False),
        pa.field("episode_id", pa.string(), nullable=False),
        # the quarantine rows of this episode that were open when it was released
        pa.field("quarantine_ids", pa.list_(pa.string()), nullable=False),
        pa.field("outcome", pa.string(), nullable=False),  # "committed" | "already_committed"
        pa.field("attempt_id", pa.string(), nullable=False),  # the attempt visible in episodes
        # the raw rows the episode was rebuilt from: attempt ids and Kafka offsets
        pa.field("raw_pointer", pa.string(), nullable=False),
        pa.field("note", pa.string(), nullable=False),  # the operator's reason ("registry fixed")
        pa.field("released_at_ns", pa.int64(), nullable=False),
    ]
)

# One row per deleted episode (`pilake episodes delete`): the episode leaves every new selection
# at once (the visibility rule, SPEC.md §7.7, drops deleted ids) and its rows are removed by the
# next GC once no dataset pin holds them. Append-only; an episode id deleted twice counts once.
DELETIONS_SCHEMA = pa.schema(
    [
        pa.field("episode_id", pa.string(), nullable=False),
        pa.field("deletion_id", pa.string(), nullable=False),  # one per `delete` call
        pa.field("reason", pa.string(), nullable=False),  # the operator's words ("consent withdrawn")
        pa.field("selection", pa.string(), nullable=False),  # the SQL (or ids) that chose it
        pa.field("deleted_at_ns", pa.int64(), nullable=False),
    ]
)

# Dataset pins (`pilake dataset create`, SPEC.md §7.9): one row, in one data file of its own,
# per live pin; deleting a pin removes its file from the table. A pin names the exact rows it
# reads, (episode_id, attempt_id) per episode, so compaction and GC may move and delete files
# freely while GC keeps every row a live pin names (architecture decision 9).
PINS_SCHEMA = pa.schema(
    [
        pa.field("name", pa.string(), nullable=False),
        pa.field("created_at_ns", pa.int64(), nullable=False),
        pa.field("sql", pa.string()),  # null: chosen by ids, not SQL
        pa.field("lake_root", pa.string(), nullable=False),  # informational
        # JSON {"episodes": v, "steps": v, "video": v}: the versions the pin was taken at
        pa.field("table_versions", pa.string(), nullable=False),
        pa.field("episode_count", pa.int64(), nullable=False),  # listing pins reads no id list
        pa.field("episode_ids", pa.list_(pa.string()), nullable=False),  # sorted
        pa.field("attempt_ids", pa.list_(pa.string()), nullable=False),  # same order
        # sha256 of the pinned rows' identity and shape (pi_format.lake.pins.content_hash)
        pa.field("content_hash", pa.string(), nullable=False),
    ]
)

# Annotations of episodes after the fact (`pilake annotate`, SPEC.md §7.12): one row per
# (episode, step span, kind, source, version), append-only; no video or step is rewritten. The
# current value of a (episode, span, kind, source) is its highest version; an episode's
# annotations follow the episode, not the attempt (`pi_format.lake.annotations`).
ANNOTATIONS_SCHEMA = pa.schema(
    [
        # sha256 of every other column but written_at_ns: the same annotation imported twice is
        # one annotation (readers count it once; an import skips the ids the table has)
        pa.field("annotation_id", pa.string(), nullable=False),
        pa.field("episode_id", pa.string(), nullable=False),
        pa.field("attempt_id", pa.string(), nullable=False),  # the attempt it was written against
        pa.field("step_start", pa.int32(), nullable=False),  # the span [step_start, step_end)
        pa.field("step_end", pa.int32(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),  # instruction | subtask | quality_score | tag
        pa.field("value", pa.string(), nullable=False),
        pa.field("source", pa.string(), nullable=False),  # who or what wrote it ("lerobot:tasks")
        pa.field("version", pa.int64(), nullable=False),  # the source's version of it
        pa.field("written_at_ns", pa.int64(), nullable=False),  # what a pin's creation time compares
    ]
)

TABLE_SCHEMAS: dict[str, pa.Schema] = {
    "raw": RAW_SCHEMA,
    "episodes": EPISODES_SCHEMA,
    "steps": STEPS_SCHEMA,
    "video": VIDEO_SCHEMA,
    "quarantine": QUARANTINE_SCHEMA,
    "quarantine_releases": QUARANTINE_RELEASES_SCHEMA,
    "deletions": DELETIONS_SCHEMA,
    "pins": PINS_SCHEMA,
    "annotations": ANNOTATIONS_SCHEMA,
}
