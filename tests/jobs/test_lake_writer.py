"""Unit tests of pi_format.lake.writer (the commit protocol) on a temporary local lake."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from deltalake import DeltaTable
from pi_format import RAW_SCHEMA, TABLE_SCHEMAS, CameraSpec, CameraVideo, Episode, EpisodeMeta, LakeLayout
from pi_format.lake import EpisodeRows, LakeWriter, bucket_app_id, writer_app_id
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
    assert (DeltaTable(layout.episodes).transaction_version(bucket_app_id("ep-1")) or 0) > 0
    assert DeltaTable(layout.episodes).transaction_version(writer_app_id("default")) == 1
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


def test_delta_filters_on_any_column_find_the_rows_of_the_writers_own_files(tmp_path: Path) -> None:
    """Readers that filter through delta-rs (operator tools, `read_visible`) prune files on the
    add actions' statistics: a column left out of them made every file look empty."""
    import pyarrow.compute as pc

    layout = LakeLayout(str(tmp_path / "lake"))
    writer = LakeWriter(layout)
    raw = pa.Table.from_pylist(
        [
            {
                "episode_id": "ep-1" if offset % 2 else None,
                "chunk_index": offset,
                "kafka_topic": "topic-a",
                "kafka_partition": offset % 3,
                "kafka_offset": offset,
                "received_at_ns": 10 + offset,
                "attempt_id": "att-1",
                "message": b"m",
            }
            for offset in range(6)
        ],
        schema=RAW_SCHEMA,
    )
    writer.write_raw(raw)
    writer.commit_episodes([_featurized("ep-1", "att-1"), _featurized("ep-2", "att-2", seed=1)])
    cases = [
        ("raw", pc.field("kafka_partition") == 1, 2),
        ("raw", (pc.field("kafka_topic") == "topic-a") & (pc.field("kafka_offset") >= 4), 2),
        ("raw", pc.field("episode_id").is_null(), 3),
        ("steps", pc.field("step_index") == 0, 2),
        ("steps", pc.field("timestamp_ns") > 0, 10),
        ("video", pc.field("chunk_index") == 1, 2),
        ("episodes", pc.field("robot_id") == "r1", 2),
        ("episodes", pc.field("success"), 2),
    ]
    for name, where, want in cases:
        got = DeltaTable(layout.table(name)).to_pyarrow_table(filters=where).num_rows
        assert got == want, (name, str(where), got)


def test_a_lake_made_before_gets_its_statistics_columns_declared(tmp_path: Path) -> None:
    import pyarrow.compute as pc

    layout = LakeLayout(str(tmp_path / "lake"))
    for name, schema in TABLE_SCHEMAS.items():  # tables as lakes made before 2026-11-24 have them
        old = {"delta.checkpointInterval": "100"}
        DeltaTable.create(layout.table(name), schema=schema, configuration=old)
    writer = LakeWriter(layout)
    for name in TABLE_SCHEMAS:
        configuration = DeltaTable(layout.table(name)).metadata().configuration
        assert configuration["delta.dataSkippingStatsColumns"] == "episode_id,attempt_id", name
    writer.commit_episodes([_featurized("ep-1", "att-1")])
    steps = DeltaTable(layout.steps).to_pyarrow_table(filters=pc.field("step_index") == 0)
    assert steps.num_rows == 1
    versions = {name: DeltaTable(layout.table(name)).version() for name in TABLE_SCHEMAS}
    LakeWriter(layout)  # declared once: opening again commits nothing
    assert versions == {name: DeltaTable(layout.table(name)).version() for name in TABLE_SCHEMAS}


def test_group_commit_is_one_commit_per_table_with_locators(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    layout = LakeLayout(str(tmp_path / "lake"))
    writer = LakeWriter(layout, writer_id="sink-0")
    group = [_featurized(f"ep-{i}", f"att-{i}", seed=i) for i in (2, 0, 1)]
    versions = {n: DeltaTable(layout.table(n)).version() for n in ("steps", "video", "episodes")}
    result = writer.commit_episodes([*group, group[0]])  # ep-2 twice: counted once
    assert result.committed == ("ep-0", "ep-1", "ep-2") and result.duplicates == ("ep-2",)
    for name, before in versions.items():  # one Delta commit per table for the whole group
        assert DeltaTable(layout.table(name)).version() == before + 1
        assert len(DeltaTable(layout.table(name)).file_uris()) == 1
    markers = DeltaTable(layout.episodes).to_pyarrow_table().sort_by("episode_id")
    for row, source in zip(markers.to_pylist(), sorted(group, key=lambda g: g.episode_id), strict=True):
        steps = pq.ParquetFile(f"{layout.steps}/{row['steps_file']}").read_row_group(row["steps_row_group"])
        assert steps.column("episode_id").to_pylist() == [row["episode_id"]] * source.steps.num_rows
        assert steps.column("step_index").to_pylist() == list(range(source.steps.num_rows))
        video = pq.ParquetFile(f"{layout.video}/{row['video_file']}")
        for camera, first in zip(row["cameras"], row["video_row_groups"], strict=True):
            chunks = source.video.filter(pa.compute.equal(source.video.column("camera"), camera))
            for chunk in range(chunks.num_rows):
                got = video.read_row_group(first + chunk)
                assert got.num_rows == 1
                assert got.column("episode_id")[0].as_py() == row["episode_id"]
                assert got.column("camera")[0].as_py() == camera
                assert got.column("chunk_index")[0].as_py() == chunk
    assert DeltaTable(layout.episodes).transaction_version(writer_app_id("sink-0")) == 1
    assert writer.commit_episodes(group).committed == ()  # all duplicates now


def test_lost_race_drops_what_the_winner_committed(tmp_path: Path) -> None:
    from pi_format.lake import STAGE_ROWS_WRITTEN

    layout = LakeLayout(str(tmp_path / "lake"))
    other = LakeWriter(layout, writer_id="other")
    won: list[object] = []

    def other_commits_first(stage: str) -> None:
        # `ours` has read the lake and written its rows; `other` commits ep-2 before our markers
        if stage == STAGE_ROWS_WRITTEN and not won:
            won.append(
                other.commit_episodes([_featurized("ep-2", "att-other"), _featurized("ep-3", "att-3")])
            )

    ours = LakeWriter(layout, writer_id="ours", on_stage=other_commits_first)
    result = ours.commit_episodes([_featurized("ep-1", "att-1"), _featurized("ep-2", "att-ours")])
    assert ours.commit_conflicts == 1  # Delta refused our first markers commit
    assert result.committed == ("ep-1",) and result.duplicates == ("ep-2",)
    rows = _rows(layout.episodes)
    assert sorted(rows.column("episode_id").to_pylist()) == ["ep-1", "ep-2", "ep-3"]
    assert ours.committed_attempt("ep-2") == "att-other"
    # a new writer learns every commit from the table alone
    assert LakeWriter(layout).committed_count == 3


def test_old_lake_gets_locator_columns(tmp_path: Path) -> None:
    from deltalake import write_deltalake
    from pi_format.lake import LOCATOR_COLUMNS

    layout = LakeLayout(str(tmp_path / "lake"))
    old_schema = pa.schema([f for f in TABLE_SCHEMAS["episodes"] if f.name not in LOCATOR_COLUMNS])
    old_row = _featurized("ep-0", "att-0").episode.select(old_schema.names).cast(old_schema)
    write_deltalake(layout.episodes, old_row)
    writer = LakeWriter(layout)
    assert writer.committed_attempt("ep-0") == "att-0"
    writer.commit_episode(_featurized("ep-1", "att-1"))
    rows = _rows(layout.episodes).sort_by("episode_id")
    assert rows.column("steps_file").to_pylist()[0] is None
    assert rows.column("steps_file").to_pylist()[1] is not None


def test_writer_learns_other_writers_markers_from_the_log(tmp_path: Path) -> None:
    """A writer learns what others committed from the JSON commits since its last look (or, after
    a long gap or a cleaned log, from the file list) and never commits those episodes again."""
    layout = LakeLayout(str(tmp_path / "lake"))
    watcher = LakeWriter(layout, writer_id="watcher")
    other = LakeWriter(layout, writer_id="other")
    other.commit_episodes([_featurized("ep-1", "att-1"), _featurized("ep-2", "att-2")])
    # a few versions since its last look: read from _delta_log/<version>.json
    result = watcher.commit_episodes([_featurized("ep-2", "att-9"), _featurized("ep-3", "att-3")])
    assert result.committed == ("ep-3",) and result.duplicates == ("ep-2",)
    assert watcher.committed_attempt("ep-1") == "att-1"
    # log entries cleaned up behind a checkpoint (every 25 commits): the file list instead
    seen = DeltaTable(layout.episodes).version()
    for i in range(26):
        other.commit_episode(_featurized(f"ep-{4 + i}", f"att-{4 + i}", seed=i))
    assert list(Path(layout.episodes, "_delta_log").glob("*.checkpoint.parquet"))
    Path(layout.episodes, "_delta_log", f"{seen + 1:020d}.json").unlink()
    assert watcher.commit_episode(_featurized("ep-4", "att-99")) == -1
    assert watcher.committed_attempt("ep-29") == "att-29"
    episodes = _rows(layout.episodes)
    assert sorted(episodes.column("episode_id").to_pylist()) == sorted(f"ep-{i}" for i in range(1, 30))


def test_plain_appends_commit_from_a_snapshot_far_behind(tmp_path: Path) -> None:
    """A writer whose snapshot is many versions behind (others committed meanwhile; it updates
    its snapshot only after its own commits) still commits; nothing is lost or doubled."""
    layout = LakeLayout(str(tmp_path / "lake"))
    sleeper = LakeWriter(layout, writer_id="sleeper")
    busy = LakeWriter(layout, writer_id="busy")
    for i in range(30):
        busy.commit_episode(_featurized(f"busy-{i}", f"b-{i}", seed=i))
    assert DeltaTable(layout.steps).version() - sleeper._tables["steps"].version() == 30
    assert sleeper.commit_episode(_featurized("late", "l-1")) == 31
    assert DeltaTable(layout.steps).version() == 31
    assert _rows(layout.episodes).num_rows == 31
    steps = _rows(layout.steps)
    assert set(steps.column("episode_id").to_pylist()) == {f"busy-{i}" for i in range(30)} | {"late"}
