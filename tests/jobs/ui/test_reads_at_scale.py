"""The reads that keep pages under 1 s on a lake of 100,000 episodes (benchmarks/ui), each
tested equal to the plain read it replaces: an episode's steps and video through its marker's
locators (a compacted file holds thousands of episodes: a filtered scan of it took seconds),
the quarantine's raw previews in two passes (attempt ids, then only the matching row groups),
and a pin's content hash built by Arrow (`pi_format.lake.content_hash` per row took seconds for
a lake's pins)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable
from pi_format import RAW_SCHEMA, LakeLayout
from pi_format.lake import LakeWriter, content_hash
from pi_format.lake.pins import HASH_COLUMNS
from pi_jobs.ui import _reads
from pi_jobs.ui._ops import _raw_rows, fast_content_hash

from tests.jobs.ui.conftest import UiLake


def _scanned(layout: LakeLayout, episode_id: str, monkeypatch: pytest.MonkeyPatch) -> _reads.Episode:
    """read_episode as for a marker written before locators: every table scanned."""
    plain = _reads.episode_rows

    def without_locators(layout: LakeLayout, episode_id: str) -> tuple[dict[str, object], pa.Table]:
        row, rows = plain(layout, episode_id)
        return {**row, "steps_file": None, "steps_row_group": None, "video_file": None}, rows

    with monkeypatch.context() as patch:
        patch.setattr(_reads, "episode_rows", without_locators)
        return _reads.read_episode(layout, episode_id)


def _same(a: _reads.Episode, b: _reads.Episode) -> None:
    assert (a.attempt_id, a.cameras, a.camera_offsets_s) == (b.attempt_id, b.cameras, b.camera_offsets_s)
    assert (a.times_s, a.proprio, a.action) == (b.times_s, b.proprio, b.action)
    assert len(a.times_s) > 0


def test_episode_and_video_by_locator_equal_a_scan_before_and_after_compaction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pi_jobs.maintenance import compact

    from tests.fixtures.lake_factory import write_lake

    # one group commit per episode, steps in row groups of 16 (3 per episode), several video
    # chunks per camera; compaction then merges them into one file group of every episode
    lake = write_lake(
        tmp_path / "lake",
        episodes=5,
        steps=40,
        cameras=("front", "wrist"),
        size=(32, 24),
        group=1,
        steps_group_steps=16,
        garbage_attempt=False,
    )
    layout = lake.layout
    before = {e: _reads.read_episode(layout, e) for e in lake.episodes}
    report = compact(layout)
    assert report.groups_merged == 5 and report.files_after["video"] == report.files_after["steps"] == 1
    for episode_id in lake.episodes:
        located = _reads.read_episode(layout, episode_id)
        _same(located, before[episode_id])
        _same(located, _scanned(layout, episode_id, monkeypatch))
        assert len(located.times_s) == 40
        for camera in located.cameras:
            by_locator = _reads.video_rows(layout, episode_id, located.attempt_id, camera, located.row)
            by_scan = _reads.video_rows(layout, episode_id, located.attempt_id, camera)
            assert by_locator.num_rows == by_scan.num_rows > 1
            for column in ("chunk_index", "frame_timestamps_ns", "codec", "data"):
                assert by_locator.column(column).to_pylist() == by_scan.column(column).to_pylist()


def test_raw_previews_read_exactly_the_wanted_attempts_across_files_and_row_groups(tmp_path: Path) -> None:
    layout = LakeLayout(str(tmp_path / "lake"))
    writer = LakeWriter(layout, writer_id="test")
    rows = []
    for k in range(300):  # several row groups per file (64 raw rows each), three files
        rows.append(
            {
                "episode_id": f"e{k}",
                "chunk_index": 0,
                "kafka_topic": "episodes.raw.v1",
                "kafka_partition": k % 3,
                "kafka_offset": k,
                "received_at_ns": k,
                "attempt_id": f"a{k % 97}",
                "message": bytes([k % 251]) * (k + 1),
            }
        )
    for first in (0, 100, 200):
        writer.write_raw(pa.Table.from_pylist(rows[first : first + 100], schema=RAW_SCHEMA))
    wanted = {"a3", "a50", "a96", "not-there"}
    got = _raw_rows(layout, wanted)
    assert got is not None
    every = DeltaTable(layout.raw).to_pyarrow_table()
    expected = every.filter(pc.is_in(every.column("attempt_id"), value_set=pa.array(sorted(wanted))))
    key = [("kafka_offset", "ascending")]
    columns = ["attempt_id", "kafka_topic", "kafka_partition", "kafka_offset", "message"]
    assert got.sort_by(key).to_pylist() == expected.select(columns).sort_by(key).to_pylist()
    assert got.num_rows == 10  # a3: 3, 100, 197, 294; a50: 50, 147, 244; a96: 96, 193, 290
    assert _raw_rows(layout, {"none"}) is None
    assert _raw_rows(LakeLayout(str(tmp_path / "no-lake")), {"a3"}) is None


def _hash_rows(ids: list[str], cameras: list[list[str]]) -> pa.Table:
    n = len(ids)
    return pa.table(
        {
            "episode_id": pa.array(ids, pa.string()),
            "attempt_id": pa.array([f"att-{i}" for i in range(n)], pa.string()),
            "committed_at_ns": pa.array([1_770_000_000_000_000_000 + i for i in range(n)], pa.int64()),
            "step_count": pa.array([100 + i for i in range(n)], pa.int64()),
            "proprio_dim": pa.array([14] * n, pa.int32()),
            "action_dim": pa.array([-1] * n, pa.int32()),
            "cameras": pa.array(cameras, pa.list_(pa.string())),
            "video_width": pa.array([224] * n, pa.int32()),
            "video_height": pa.array([224] * n, pa.int32()),
            "video_chunk_frames": pa.array([10] * n, pa.int32()),
        }
    )


@pytest.mark.parametrize(
    "odd_id",
    [None, 'ep-"quoted"', "ep-back\\slash", "ep-é", "ep-\u2603", "ep-\ttab", "ep-</script>"],
)
def test_fast_content_hash_equals_content_hash(odd_id: str | None) -> None:
    ids = [f"ep-{i:05d}" for i in range(5000)]
    cameras = [["cam_high", "cam_low", "wrist"] if i % 3 else ["front"] for i in range(5000)]
    cameras[7] = []
    if odd_id is not None:
        ids[4321] = odd_id
    rows = _hash_rows(ids, cameras)
    chunked = pa.concat_tables([rows.slice(0, 1234), rows.slice(1234)])  # several chunks
    for table in (rows, chunked, rows.slice(0, 1), rows.slice(0, 0)):
        assert fast_content_hash(table) == content_hash(table)


def test_fast_content_hash_of_the_lakes_rows(ui_lake: UiLake) -> None:
    rows = DeltaTable(ui_lake.layout.episodes).to_pyarrow_table(columns=list(HASH_COLUMNS))
    assert fast_content_hash(rows) == content_hash(rows)
    with pytest.raises(ValueError, match="needs episodes columns"):
        fast_content_hash(rows.drop_columns(["cameras"]))


def test_pinned_rows_by_arrow_equal_pinned_rows_with_duplicates_and_missing_pairs() -> None:
    from pi_format.lake import pinned_rows
    from pi_jobs.ui._ops import _KEY_SEP, PagePin, _pinned

    rows = _hash_rows([f"ep-{i:03d}" for i in range(50)], [["front"]] * 50)
    rows = pa.concat_tables([rows, rows.slice(10, 5)])  # five pairs twice (a file read twice)
    ids = [f"ep-{i:03d}" for i in range(5, 60, 2)]  # some beyond the rows: missing
    attempts = [f"att-{i}" if i != 7 else "att-other" for i in range(5, 60, 2)]  # one wrong attempt
    pin = PagePin("p", None, "h", 0, {}, pa.array(ids), pa.array(attempts))
    keys = pc.binary_join_element_wise(rows.column("episode_id"), rows.column("attempt_id"), _KEY_SEP)
    expected = pinned_rows(rows, ids, attempts)
    got = _pinned(rows, keys, pin)
    assert got.num_rows == expected.num_rows == 22  # 5..49 odd, but ep-007 not with that attempt
    assert fast_content_hash(got) == content_hash(expected)
