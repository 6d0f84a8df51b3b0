"""`pilake backfill` (pi_jobs.backfill): re-featurize a small lake from its raw table.

The lake is made the way the stream job makes one, without a broker: wire chunks of hand-built
episodes become raw rows (pi_jobs.stream._records.raw_rows), are featurized by the stream
job's featurizer and committed with their raw rows by `LakeWriter.commit_episodes`, then
recorded in the catalog. The backfill itself runs on the real PyFlink mini-cluster.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable
from pi_format import CameraSpec, CameraVideo, Episode, EpisodeMeta, LakeLayout
from pi_format.lake import EpisodeRows, LakeWriter, read_committed
from pi_format.video import encode_mp4

integration = pytest.mark.integration


def _episode(index: int, episode_id: str) -> Episode:
    rng = np.random.default_rng(index)
    steps, frames = 12, 8
    rgb = [np.full((48, 64, 3), (30 * i + 20 * index) % 255, np.uint8) for i in range(frames)]
    spec = CameraSpec(name="cam_high", codec="h264", container="mp4", width=64, height=48, fps=10.0)
    cam = CameraVideo(
        spec, np.arange(frames, dtype=np.int64) * 100_000_000, encode_mp4(rgb, fps=10.0, width=64, height=48)
    )
    meta = EpisodeMeta(episode_id, "r1", "aloha", "stack", 0, 15.0, index % 2 == 0)
    return Episode(
        meta,
        np.arange(steps, dtype=np.int64) * int(1e9 / 15.0),
        rng.standard_normal((steps, 4)).astype(np.float32),
        rng.standard_normal((steps, 2)).astype(np.float32),
        (cam,),
    )


def make_stream_lake(root: Path, count: int) -> tuple[LakeLayout, str, list[str]]:
    """A lake of `count` episodes committed as the stream job commits them (raw rows included),
    32x32 video, recorded in a chdb catalog. Returns (layout, catalog path, episode ids)."""
    from pi_catalog import Catalog
    from pi_format.wire import EpisodeAssembler, decode_chunk, encode_episode
    from pi_jobs.stream._records import SourceMessage, raw_rows
    from pi_jobs.stream.featurize import FeaturizeConfig, featurize

    layout = LakeLayout(str(root / "lake"))
    writer = LakeWriter(layout, writer_id="test-stream")
    offset = 0
    group: list[EpisodeRows] = []
    raws: list[pa.Table] = []
    ids = [f"bf-{uuid.uuid4().hex[:6]}-{i}" for i in range(count)]
    for i, eid in enumerate(ids):
        episode = _episode(i, eid)
        attempt = str(uuid.uuid4())
        asm = EpisodeAssembler(eid)
        messages = []
        for value in encode_episode(episode, payload_bytes=4096):
            chunk = decode_chunk(value)
            asm.add(chunk)
            messages.append(SourceMessage("raw", 0, offset, time.time_ns(), eid, value, chunk.chunk_index))
            offset += 1
        raws.append(raw_rows(messages, attempt, [m.chunk_index for m in messages]))
        group.append(
            featurize(
                asm.assemble(),
                attempt_id=attempt,
                received_at_ns=time.time_ns(),
                raw_size_bytes=int(asm.size_bytes),
                committed_at_ns=time.time_ns(),
                config=FeaturizeConfig(video_width=32, video_height=32, chunk_frames=4),
            )
        )
    result = writer.commit_episodes(group, raw=pa.concat_tables(raws))
    assert len(result.committed) == count
    catalog_path = str(root / "catalog")
    catalog = Catalog(catalog_path)
    catalog.record_episodes(result.episodes, episodes_version=result.version)
    catalog.close()
    return layout, catalog_path, ids


def _rows(layout: LakeLayout, name: str) -> pa.Table:
    return DeltaTable(layout.table(name)).to_pyarrow_table()


def test_supersede_commits_a_new_visible_attempt_once(tmp_path: Path) -> None:
    from tests.fixtures.lake_factory import lake_rows, make_episode

    layout = LakeLayout(str(tmp_path / "lake"))
    writer = LakeWriter(layout, writer_id="w")
    fakes = [make_episode(i, steps=6, cameras=("cam",), size=(32, 32), seed=0) for i in range(2)]
    writer.commit_episodes(lake_rows(fakes, (32, 32)))

    def tagged(tag: str | None) -> list[EpisodeRows]:
        out = []
        for rows in lake_rows(fakes, (32, 32)):
            marker = rows.episode
            marker = marker.set_column(
                marker.schema.get_field_index("attempt_id"), "attempt_id", pa.array([str(uuid.uuid4())])
            )
            index = marker.schema.get_field_index("featurizer")
            marker = marker.set_column(index, marker.schema.field(index), pa.array([tag], pa.string()))
            out.append(EpisodeRows(episode=marker, steps=rows.steps, video=rows.video))
        return out

    # without supersede an already committed episode stays a duplicate, as before
    assert writer.commit_episodes(tagged("x@1")).committed == ()
    first = writer.commit_episodes(tagged("x@1"), supersede=True)
    assert len(first.committed) == 2
    # the same featurizer again (this writer, or a fresh one reading the table): duplicates
    assert writer.commit_episodes(tagged("x@1"), supersede=True).duplicates == first.committed
    assert LakeWriter(layout, writer_id="w2").commit_episodes(tagged("x@1"), supersede=True).committed == ()
    visible = read_committed(layout)
    assert visible.column("featurizer").to_pylist() == ["x@1", "x@1"]
    assert sorted(visible.column("attempt_id").to_pylist()) == sorted(
        first.episodes.column("attempt_id").to_pylist()
    )
    # another featurizer supersedes again
    assert len(writer.commit_episodes(tagged("y@1"), supersede=True).committed) == 2
    assert read_committed(layout).column("featurizer").to_pylist() == ["y@1", "y@1"]


@integration
def test_backfill_res96_supersedes_and_reruns_as_noop(tmp_path: Path) -> None:
    from pi_catalog import Catalog, backfill_runs
    from pi_jobs.backfill import BackfillConfig, run_backfill

    layout, catalog_path, ids = make_stream_lake(tmp_path, 3)
    before = {name: _rows(layout, name) for name in ("episodes", "steps", "video")}
    old_attempts = dict(
        zip(
            *[read_committed(layout).column(c).to_pylist() for c in ("episode_id", "attempt_id")], strict=True
        )
    )
    chosen = sorted(ids)[:2]
    # a dataset pinned before the backfill reads the same samples after it
    from pi_jobs.maintenance.datasets import create_dataset
    from pi_loader import Dataset, SampleSpec

    create_dataset(layout, "before-bf", episode_ids=ids)
    spec = SampleSpec(cameras=("cam_high",), action_horizon=2)
    pinned = Dataset(layout, snapshot="before-bf", spec=spec, seed=3)
    samples_before = [
        np.asarray(pinned[i]["observation.images.cam_high"]).tobytes() for i in range(len(pinned))
    ]
    config = BackfillConfig(
        lake_root=layout.root,
        catalog_path=catalog_path,
        featurizer="res96",
        work_dir=tmp_path / "work",
        where=f"episode_id IN ('{chosen[0]}', '{chosen[1]}')",
        group_commit_episodes=1,
    )
    report = run_backfill(config)
    assert (report.selected, report.committed, report.failed, report.duplicates) == (2, 2, 0, 0)
    assert report.raw_bytes > 0 and report.episodes_per_s > 0

    visible = read_committed(layout)
    by_id = {r["episode_id"]: r for r in visible.to_pylist()}
    for eid in ids:
        if eid in chosen:
            assert by_id[eid]["featurizer"] == "res96@1"
            assert by_id[eid]["attempt_id"] != old_attempts[eid]
            assert (by_id[eid]["video_width"], by_id[eid]["video_height"]) == (96, 96)
        else:
            assert by_id[eid]["featurizer"] is None and by_id[eid]["attempt_id"] == old_attempts[eid]
    episodes = _rows(layout, "episodes")
    assert pc.sum(pc.equal(episodes.column("featurizer"), "res96@1")).as_py() == 2
    video = _rows(layout, "video")
    new = video.filter(
        pc.is_in(video.column("attempt_id"), pa.array([by_id[e]["attempt_id"] for e in chosen]))
    )
    assert new.num_rows > 0 and set(new.column("width").to_pylist()) == {96}
    # the old attempts' rows are untouched (a pin naming them reads the same)
    for name in ("episodes", "steps", "video"):
        old = _rows(layout, name)
        old = old.filter(pc.is_in(old.column("attempt_id"), pa.array(list(old_attempts.values()))))
        assert old.sort_by("episode_id").equals(
            before[name].select(old.column_names).sort_by("episode_id")
        ), name
    catalog = Catalog(catalog_path)
    widths = catalog.query_arrow(
        "SELECT episode_id, video_width FROM episodes ORDER BY episode_id"
    ).to_pylist()
    assert {r["episode_id"]: r["video_width"] for r in widths} == {e: 96 if e in chosen else 32 for e in ids}
    runs = backfill_runs(catalog).to_pylist()
    assert [(r["featurizer"], r["committed"], r["status"]) for r in runs] == [("res96@1", 2, "finished")]
    catalog.close()

    again_pinned = Dataset(layout, snapshot="before-bf", spec=spec, seed=3)
    assert [
        np.asarray(again_pinned[i]["observation.images.cam_high"]).tobytes() for i in range(len(again_pinned))
    ] == (samples_before)
    assert Dataset(layout, spec=spec).snapshot.attempt_ids != pinned.snapshot.attempt_ids
    from pi_jobs.ops.audit import audit

    report_audit = audit(layout, catalog_path=catalog_path)
    assert report_audit.missing == 0 and report_audit.duplicated == 0 and report_audit.catalog_agrees

    # (c) a re-run finds everything done and writes nothing
    version = DeltaTable(layout.episodes).version()
    again = run_backfill(config)
    assert (again.selected, again.already_done, again.committed) == (2, 2, 0)
    assert DeltaTable(layout.episodes).version() == version


@integration
def test_backfill_killed_half_way_restarts_exactly_once(tmp_path: Path) -> None:
    layout, catalog_path, ids = make_stream_lake(tmp_path, 6)
    env = {
        **os.environ,
        "PILAKE_HOME": str(tmp_path / "home"),
        "PILAKE_LAKE": layout.root,
        "PILAKE_CATALOG": catalog_path,
        "PILAKE_FAULT_BACKFILL_DELAY_S": "1.0",
    }
    command = [
        sys.executable,
        "-m",
        "pi_jobs.cli",
        "backfill",
        "--featurizer",
        "gop10",
        "--group-commit-episodes",
        "1",
    ]

    def tagged() -> int:
        rows = _rows(layout, "episodes")
        return int(pc.sum(pc.equal(rows.column("featurizer"), "gop10@1")).as_py() or 0)

    log_path = tmp_path / "first.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        deadline = time.monotonic() + 240
        try:
            while tagged() < 1:
                assert proc.poll() is None, log_path.read_text()[-3000:]
                assert time.monotonic() < deadline, log_path.read_text()[-3000:]
                time.sleep(0.1)
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    done_at_kill = tagged()
    assert 1 <= done_at_kill < len(ids), "the kill came too late to test a restart"
    time.sleep(2)  # nothing of the killed run commits afterwards
    assert tagged() == done_at_kill

    env.pop("PILAKE_FAULT_BACKFILL_DELAY_S")
    second = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert f"{done_at_kill} already done" in second.stdout, second.stdout
    episodes = _rows(layout, "episodes")
    per_episode = (
        episodes.filter(pc.equal(episodes.column("featurizer"), "gop10@1")).column("episode_id").to_pylist()
    )
    assert sorted(per_episode) == sorted(ids)  # every episode exactly once
    visible = read_committed(layout)
    assert visible.column("featurizer").to_pylist() == ["gop10@1"] * len(ids)
    from pi_jobs.ops.audit import audit

    checked = audit(layout, catalog_path=catalog_path)
    assert checked.missing == 0 and checked.duplicated == 0 and checked.catalog_agrees, checked


@integration
def test_backfill_into_a_derived_lake_reports_a_corrupted_episode_and_goes_on(tmp_path: Path) -> None:
    from deltalake import write_deltalake
    from pi_jobs.backfill import BackfillConfig, run_backfill

    layout, catalog_path, ids = make_stream_lake(tmp_path, 4)
    broken = sorted(ids)[1]
    raw = DeltaTable(layout.raw).to_pyarrow_table()
    messages = raw.column("message").to_pylist()
    owners = raw.column("episode_id").to_pylist()
    hit = next(i for i, e in enumerate(owners) if e == broken)
    corrupted = bytearray(messages[hit])
    for k in range(len(corrupted) // 2, len(corrupted) // 2 + 16):  # flip bytes inside the payload
        corrupted[k] ^= 0xFF
    messages[hit] = bytes(corrupted)
    raw = raw.set_column(raw.schema.get_field_index("message"), "message", pa.array(messages, pa.binary()))
    write_deltalake(layout.raw, raw, mode="overwrite")
    main_version = DeltaTable(layout.episodes).version()

    config = BackfillConfig(
        lake_root=layout.root,
        catalog_path=catalog_path,
        featurizer="chunk20",
        work_dir=tmp_path / "work",
        into="c20",
        group_commit_episodes=2,
    )
    report = run_backfill(config)
    # every selected episode is accounted for: committed or reported as failed, with its reason
    assert (report.selected, report.committed, report.failed) == (4, 3, 1)
    assert report.processed == report.selected
    assert report.failures[0].startswith(f"{broken}: "), report.failures
    derived = LakeLayout(f"{layout.root}/derived/c20")
    assert report.target_lake == derived.root
    rows = read_committed(derived, ["video_chunk_frames", "featurizer"])
    assert sorted(rows.column("episode_id").to_pylist()) == sorted(e for e in ids if e != broken)
    assert set(rows.column("video_chunk_frames").to_pylist()) == {20}
    assert set(rows.column("featurizer").to_pylist()) == {"chunk20@1"}
    assert DeltaTable(layout.episodes).version() == main_version  # the source lake is untouched
    again = run_backfill(config)
    assert (again.already_done, again.committed, again.failed) == (3, 0, 1)


def test_the_plan_names_the_raw_files_of_each_episode(tmp_path: Path) -> None:
    from pi_jobs.backfill import BackfillConfig, plan_backfill
    from pi_jobs.backfill._raw_files import FILES_SEP, raw_files_of

    layout, catalog_path, ids = make_stream_lake(tmp_path, 3)
    raw = DeltaTable(layout.raw).to_pyarrow_dataset().to_table(columns=["episode_id", "__filename"])
    truth: dict[str, set[str]] = {}
    for episode_id, path in zip(
        raw.column("episode_id").to_pylist(), raw.column("__filename").to_pylist(), strict=True
    ):
        truth.setdefault(episode_id, set()).add(Path(path).name)
    found = raw_files_of(layout, [*ids, "no-such-episode"])
    assert {e: set(f) for e, f in found.items()} == truth and set(found) == set(ids)
    plan = plan_backfill(
        BackfillConfig(
            lake_root=layout.root, catalog_path=catalog_path, featurizer="res96", work_dir=tmp_path / "work"
        )
    )
    assert [(e, set(files.split(FILES_SEP))) for e, _, files in plan.items] == [
        (e, truth[e]) for e in sorted(ids)
    ]


@integration
def test_the_summary_counts_what_the_last_group_commit_committed(tmp_path: Path) -> None:
    """4 episodes in one group of 16 (the CLI's default): the only commit is the one in the
    function's close(), which PyFlink runs after the job may read FINISHED; the summary, the
    run's catalog record and a re-run must all say 4 (the summary said 0 before)."""
    from pi_catalog import Catalog, backfill_runs
    from pi_jobs.backfill import BackfillConfig, plan_backfill, run_backfill
    from pi_jobs.backfill.driver import _count_commits

    layout, catalog_path, ids = make_stream_lake(tmp_path, 4)
    config = BackfillConfig(
        lake_root=layout.root,
        catalog_path=catalog_path,
        featurizer="res96",
        work_dir=tmp_path / "work",
        where=f"episode_id IN ({', '.join(repr(e) for e in ids)})",
        group_commit_episodes=16,
    )
    plan = plan_backfill(config)
    report = run_backfill(config)
    tagged = read_committed(layout, ["featurizer"]).column("featurizer").to_pylist()
    assert tagged == ["res96@1"] * 4  # it did commit all 4
    assert (report.selected, report.already_done, report.committed, report.failed) == (4, 0, 4, 0)
    assert report.processed == 4 and report.episodes_per_s > 0, str(report)
    catalog = Catalog(catalog_path)
    assert [r["committed"] for r in backfill_runs(catalog).to_pylist()] == [4]
    catalog.close()
    # a progress read that missed the last commit is corrected from the lake, never over-counted
    assert _count_commits(config, plan, {"committed": 0, "duplicates": 0})["committed"] == 4
    assert _count_commits(config, plan, {"committed": 0, "duplicates": 1})["committed"] == 3
    again = run_backfill(config)
    assert (again.already_done, again.committed) == (4, 0)


def test_a_failed_last_catalog_record_is_repaired_by_the_driver(tmp_path: Path) -> None:
    """The last group commit happens in the function's close(); its catalog record failing there
    (after the Delta commit) must not leave the catalog without the run's episodes, whether or
    not PyFlink fails the job for it (run as `pilake backfill`, so the fault reaches the worker)."""
    from pi_catalog import Catalog
    from pi_jobs.backfill._function import CATALOG_FAILS_AT_CLOSE_ENV

    layout, catalog_path, ids = make_stream_lake(tmp_path, 3)
    env = {
        **os.environ,
        "PILAKE_HOME": str(tmp_path / "home"),
        "PILAKE_LAKE": layout.root,
        "PILAKE_CATALOG": catalog_path,
    }
    # one group of all 3: its commit and its catalog record both happen in close()
    command = [sys.executable, "-m", "pi_jobs.cli", "backfill", "--featurizer", "res96"]
    command += ["--group-commit-episodes", "16"]
    first = subprocess.run(
        command, env={**env, CATALOG_FAILS_AT_CLOSE_ENV: "1"}, capture_output=True, text=True, timeout=600
    )
    if first.returncode != 0:  # a job failed loudly is fine too; the next run repairs the catalog
        assert "fault injection" in first.stdout + first.stderr, first.stderr[-3000:]
        again = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
        assert again.returncode == 0 and "3 already done" in again.stdout + again.stderr, again.stderr[-3000:]
    tagged = read_committed(layout, ["featurizer"]).column("featurizer").to_pylist()
    assert tagged == ["res96@1"] * 3, first.stderr[-3000:]
    catalog = Catalog(catalog_path)
    rows = catalog.query_arrow("SELECT episode_id, video_width FROM episodes ORDER BY episode_id").to_pylist()
    catalog.close()
    # the catalog indexes the new attempts (96 px), not the superseded ones (32 px)
    assert [(r["episode_id"], r["video_width"]) for r in rows] == [(e, 96) for e in sorted(ids)], (
        first.stderr[-3000:]
    )
