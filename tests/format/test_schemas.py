"""Delta table schemas and the lake layout."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pytest
from pi_format import (
    EPISODES_SCHEMA,
    QUARANTINE_SCHEMA,
    RAW_SCHEMA,
    STEPS_SCHEMA,
    TABLE_SCHEMAS,
    VIDEO_SCHEMA,
    LakeLayout,
    QuarantineReason,
)


def test_table_names() -> None:
    assert set(TABLE_SCHEMAS) == {
        "raw",
        "episodes",
        "steps",
        "video",
        "quarantine",
        "quarantine_releases",
        "deletions",
        "pins",
        "annotations",
    }
    assert TABLE_SCHEMAS["episodes"] is EPISODES_SCHEMA


# deletions and pins name episodes (a pin its attempts in lists), they hold no attempt's rows
@pytest.mark.parametrize("schema", [s for n, s in TABLE_SCHEMAS.items() if n not in ("deletions", "pins")])
def test_every_table_carries_attempt_id(schema: pa.Schema) -> None:
    # The visibility rule joins on (episode_id, attempt_id): every table must carry both.
    assert schema.field("attempt_id").type == pa.string()
    assert not schema.field("attempt_id").nullable
    assert schema.field("episode_id").type == pa.string()


@pytest.mark.parametrize(
    ("schema", "columns"),
    [
        (
            RAW_SCHEMA,
            {
                "chunk_index": pa.int32(),
                "kafka_topic": pa.string(),
                "kafka_partition": pa.int32(),
                "kafka_offset": pa.int64(),
                "received_at_ns": pa.int64(),
                "message": pa.binary(),
            },
        ),
        (
            EPISODES_SCHEMA,
            {
                "robot_id": pa.string(),
                "robot_type": pa.string(),
                "task": pa.string(),
                "start_time_ns": pa.int64(),
                "control_rate_hz": pa.float64(),
                "success": pa.bool_(),
                "tags": pa.list_(pa.string()),
                "step_count": pa.int32(),
                "duration_s": pa.float64(),
                "proprio_dim": pa.int32(),
                "action_dim": pa.int32(),
                "cameras": pa.list_(pa.string()),
                "camera_fps": pa.list_(pa.float64()),
                "video_width": pa.int32(),
                "video_height": pa.int32(),
                "video_chunk_frames": pa.int32(),
                "proprio_mean": pa.list_(pa.float32()),
                "action_max": pa.list_(pa.float32()),
                "raw_size_bytes": pa.int64(),
                "received_at_ns": pa.int64(),
                "committed_at_ns": pa.int64(),
            },
        ),
        (
            STEPS_SCHEMA,
            {
                "step_index": pa.int32(),
                "timestamp_ns": pa.int64(),
                "proprio": pa.list_(pa.float32()),
                "action": pa.list_(pa.float32()),
                "camera_frame_index": pa.list_(pa.int32()),
            },
        ),
        (
            VIDEO_SCHEMA,
            {
                "camera": pa.string(),
                "chunk_index": pa.int32(),
                "first_frame": pa.int32(),
                "frame_count": pa.int32(),
                "frame_timestamps_ns": pa.list_(pa.int64()),
                "codec": pa.string(),
                "width": pa.int32(),
                "height": pa.int32(),
                "data": pa.binary(),
                "chunk_crc32": pa.int64(),
            },
        ),
        (
            QUARANTINE_SCHEMA,
            {
                "quarantine_id": pa.string(),
                "reason": pa.string(),
                "details": pa.string(),
                "kafka_topic": pa.string(),
                "kafka_partition": pa.int32(),
                "kafka_offsets": pa.list_(pa.int64()),
                "raw_pointer": pa.string(),
                "size_bytes": pa.int64(),
                "quarantined_at_ns": pa.int64(),
            },
        ),
    ],
)
def test_columns_present(schema: pa.Schema, columns: dict[str, pa.DataType]) -> None:
    for name, dtype in columns.items():
        assert schema.field(name).type == dtype, name


def test_nullable_columns_are_the_documented_ones() -> None:
    nullable = {name: sorted(f.name for f in schema if f.nullable) for name, schema in TABLE_SCHEMAS.items()}
    assert nullable == {
        "raw": ["chunk_index", "episode_id"],
        # the locator, the mergeable statistics (pi_format.stats) and the lineage (a backfill's)
        "episodes": sorted(
            ["steps_file", "steps_row_group", "video_file", "video_row_groups", "featurizer"]
            + [f"{k}_{c}" for k in ("proprio", "action") for c in ("mean64", "m2", "sketch")]
        ),
        "steps": [],
        "video": ["chunk_crc32"],  # null in rows written before chunk checksums (2026-11-26)
        "quarantine": ["episode_id"],
        "quarantine_releases": [],
        "deletions": [],
        "pins": ["sql"],
        "annotations": [],
    }


def test_episode_stats_columns_cover_proprio_and_action() -> None:
    for prefix in ("proprio", "action"):
        for stat in ("mean", "std", "min", "max"):
            assert EPISODES_SCHEMA.field(f"{prefix}_{stat}").type == pa.list_(pa.float32())


def test_quarantine_reason_values_are_stable() -> None:
    # Stored as text in the quarantine table: renaming a value breaks old rows.
    assert {r.value for r in QuarantineReason} == {
        "bad_magic",
        "unsupported_version",
        "truncated",
        "oversize",
        "bad_header",
        "chunk_checksum",
        "stream_checksum",
        "count_mismatch",
        "duplicate_conflict",
        "key_mismatch",
        "bad_metadata",
        "bad_video",
        "bad_values",
        "bad_timestamps",
        "bad_rate",
        "unknown_robot_type",
        "out_of_range",
        "incomplete_timeout",
        "corrupt",
        "limit_exceeded",
        "sink_error",
    }


def test_spec_documents_every_quarantine_reason() -> None:
    # SPEC.md section 6 is the reference for other implementations: one table row per reason.
    spec = (Path(__file__).parents[2] / "format" / "SPEC.md").read_text()
    section = spec.split("## 6. Quarantine reasons", 1)[1].split("\n## ", 1)[0]
    documented = {line.split("`")[1] for line in section.splitlines() if line.startswith("| `")}
    assert documented == {r.value for r in QuarantineReason}


def test_layout_local(tmp_path: object) -> None:
    lake = LakeLayout("/data/lake/")
    assert lake.root == "/data/lake"
    names = ("raw", "episodes", "steps", "video", "quarantine", "quarantine_releases")
    assert tuple(getattr(lake, n) for n in names) == tuple(f"/data/lake/{t}" for t in names)
    assert lake.is_local
    assert LakeLayout("rel/lake").root == os.path.abspath("rel/lake")


def test_layout_uri() -> None:
    lake = LakeLayout("s3://bucket/lake/")
    assert lake.table("steps") == "s3://bucket/lake/steps"
    assert not lake.is_local
    assert LakeLayout("file:///tmp/lake").is_local


def test_layout_errors() -> None:
    with pytest.raises(ValueError, match="lake root must be a non-empty path"):
        LakeLayout("")
    with pytest.raises(KeyError, match="unknown table 'nope'"):
        LakeLayout("/x").table("nope")
