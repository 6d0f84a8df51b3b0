"""Unit tests of pi_format.lake.writer (the commit protocol) on a temporary local lake."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from deltalake import DeltaTable
from pi_format import RAW_SCHEMA, TABLE_SCHEMAS, CameraSpec, CameraVideo, Episode, EpisodeMeta, LakeLayout
from pi_format.lake import EpisodeRows, LakeWriter, episode_app_id
from pi_format.video import encode_mp4
from pi_jobs.stream.featurize import FeaturizeConfig, featurize

CONFIG = FeaturizeConfig(video_width=32, video_height=32, chunk_frames=3)


def _featurized(episode_id: str, attempt_id: str, seed: int = 0) -> EpisodeRows:
    rng = np.random.default_rng(seed)
    frames = [np.full((32, 48, 3), 40 * i, np.uint8) for i in range(5)]
    spec = CameraSpec(name="cam", codec="h264", container="mp4", width=48, height=32, fps=10.0)
    cam = CameraVideo(
        spec, np.arange(5, dtype=np.int64) * 100_000_000, encode_mp4(frames, fps=10.0, width=48, height=32)
    )
    meta = EpisodeMeta(episode_id, "r1", "aloha", "t", 0, 10.0, True)
    ep = Episode(
        meta,
        np.arange(6, dtype=np.int64) * 100_000_000,
        rng.standard_normal((6, 2)).astype(np.float32),
        rng.standard_normal((6, 1)).astype(np.float32),
        (cam,),
    )
    return featurize(
        ep, attempt_id=attempt_id, received_at_ns=1, raw_size_bytes=2, committed_at_ns=3, config=CONFIG
    )


def _rows(path: str) -> pa.Table:
    return DeltaTable(path).to_pyarrow_table()


def test_creates_all_tables_with_schemas(tmp_path: Path) -> None:
    layout = LakeLayout(str(tmp_path / "lake"))
    LakeWriter(layout)
    for name, schema in TABLE_SCHEMAS.items():
        got = DeltaTable(layout.table(name)).schema().to_arrow()
        assert pa.schema(got).names == schema.names
    LakeWriter(layout)  # opening an existing lake works and creates nothing new
    assert DeltaTable(layout.episodes).version() == 0


def test_commit_order_and_visibility(tmp_path: Path) -> None:
    layout = LakeLayout(str(tmp_path / "lake"))
    writer = LakeWriter(layout)
    f = _featurized("ep-1", "att-1")
    version = writer.commit_episode(f)
    assert version == DeltaTable(layout.episodes).version() == 1
    assert writer.committed_attempt("ep-1") == "att-1"
    assert writer.committed_attempt("ep-2") is None
    steps, video, episodes = _rows(layout.steps), _rows(layout.video), _rows(layout.episodes)
    assert steps.num_rows == 6 and video.num_rows == 2 and episodes.num_rows == 1
    assert set(steps.column("attempt_id").to_pylist()) == {"att-1"}
    # the episodes row (the commit marker) is the newest file: written after steps and video
    newest = {
        name: max(
            pa.table(DeltaTable(layout.table(name)).get_add_actions()).column("modification_time").to_pylist()
        )
        for name in ("steps", "video", "episodes")
    }
    assert newest["episodes"] >= newest["video"] >= newest["steps"]
    assert DeltaTable(layout.episodes).transaction_version(episode_app_id("ep-1")) == 1
    proprio = np.array(steps.sort_by("step_index").column("proprio").to_pylist(), np.float32)
    want = np.array(f.steps.column("proprio").to_pylist(), np.float32)
    assert proprio.view(np.uint32).tolist() == want.view(np.uint32).tolist()


def test_duplicate_commit_writes_nothing(tmp_path: Path) -> None:
    layout = LakeLayout(str(tmp_path / "lake"))
    writer = LakeWriter(layout)
    assert writer.commit_episode(_featurized("ep-1", "att-1")) == 1
    versions = {n: DeltaTable(layout.table(n)).version() for n in TABLE_SCHEMAS}
    assert writer.commit_episode(_featurized("ep-1", "att-2", seed=1)) == -1
    assert {n: DeltaTable(layout.table(n)).version() for n in TABLE_SCHEMAS} == versions
    assert writer.committed_attempt("ep-1") == "att-1"


def test_reopen_sees_committed_ids(tmp_path: Path) -> None:
    layout = LakeLayout(str(tmp_path / "lake"))
    first = LakeWriter(layout)
    first.commit_episode(_featurized("ep-1", "att-1"))
    first.commit_episode(_featurized("ep-2", "att-2"))
    second = LakeWriter(layout)  # a new job run
    assert second.committed_count == 2
    assert second.committed_attempt("ep-2") == "att-2"
    assert second.commit_episode(_featurized("ep-2", "att-3")) == -1
    assert second.commit_episode(_featurized("ep-3", "att-4")) == 3
    assert sorted(_rows(layout.episodes).column("episode_id").to_pylist()) == ["ep-1", "ep-2", "ep-3"]


def test_app_transaction_blocks_a_stale_writer(tmp_path: Path) -> None:
    layout = LakeLayout(str(tmp_path / "lake"))
    stale = LakeWriter(layout)  # loaded its committed ids before the other writer committed
    LakeWriter(layout).commit_episode(_featurized("ep-1", "att-1"))
    assert stale.commit_episode(_featurized("ep-1", "att-9")) == -1
    assert stale.committed_attempt("ep-1") == "att-1"
    assert _rows(layout.episodes).num_rows == 1


def test_raw_and_quarantine_append(tmp_path: Path) -> None:
    layout = LakeLayout(str(tmp_path / "lake"))
    writer = LakeWriter(layout)
    raw = pa.Table.from_pylist(
        [
            {
                "episode_id": None,
                "chunk_index": None,
                "kafka_topic": "t",
                "kafka_partition": 0,
                "kafka_offset": 7,
                "received_at_ns": 1,
                "attempt_id": "a",
                "message": b"junk",
            }
        ],
        schema=RAW_SCHEMA,
    )
    assert writer.write_raw(raw) == 1
    assert writer.write_raw(raw) == 2
    assert _rows(layout.raw).column("message").to_pylist() == [b"junk", b"junk"]
    with pytest.raises(ValueError, match="must match"):
        writer.write_quarantine(raw)
