"""`pilake import lerobot`: the LeRobot v3 dataset that lerobot 0.4.4 itself wrote
(tests/fixtures/lerobot_v3, made by make_fixture.py with LeRobotDataset.create / add_frame /
save_episode / finalize; AV1 video) read into fleet episodes, and once through the broker and
the stream job into the lake."""

from __future__ import annotations

import io
import json
import shutil
import uuid
from pathlib import Path

import numpy as np
import pytest
from pi_format.video import decode_container
from pi_jobs.importing import DatasetImportError
from pi_jobs.importing.lerobot import read_lerobot

from tests.fixtures.lerobot_v3 import make_fixture as fx

DATASET = Path(__file__).resolve().parents[2] / "fixtures" / "lerobot_v3" / "dataset"


def _psnr(a: np.ndarray, b: np.ndarray) -> float:
    error = a.astype(float) - b.astype(float)
    return float(10 * np.log10(255.0**2 / np.mean(error**2)))


def test_the_fixture_is_lerobots_own_v3() -> None:
    info = json.loads((DATASET / "meta" / "info.json").read_text())
    assert (
        info["codebase_version"] == "v3.0"
        and info["features"]["observation.images.top"]["info"]["video.codec"] == "av1"
    )


def test_episodes_keep_values_boundaries_rate_and_language() -> None:
    items = list(read_lerobot(DATASET))
    assert [i.episode.step_count for i in items] == list(fx.LENGTHS)
    for n, item in enumerate(items):
        ep = item.episode
        assert ep.meta.control_rate_hz == fx.FPS and ep.meta.robot_type == "aloha"
        # bit for bit: the float32 values lerobot stored
        assert np.array_equal(ep.proprio, np.stack([fx.state(n, t) for t in range(ep.step_count)]))
        assert np.array_equal(ep.action, np.stack([fx.action(n, t) for t in range(ep.step_count)]))
        assert set(np.diff(ep.timestamps_ns).tolist()) == {100_000_000}
        # the episode's own frames (its segment of the shared AV1 file), within the codecs'
        # tolerance (lerobot's AV1 at crf 30, then the robots' H.264): not a neighbour's
        got = np.stack([f.to_ndarray(format="rgb24") for f in decode_container(ep.camera("top").data)])
        want = np.stack([fx.frame(n, t) for t in range(ep.step_count)])
        other = np.stack([fx.frame((n + 1) % 3, t) for t in range(ep.step_count)])
        assert (
            got.shape == want.shape and _psnr(got, want) > 28.0 and _psnr(got, want) > _psnr(got, other) + 6
        )
    assert [(s.value, s.start, s.end) for s in items[1].annotations] == [
        ("pick up the cube", 0, 5),
        ("place it in the bowl", 5, 9),
    ]
    assert items[1].episode.meta.task == "pick up the cube"
    assert [i.episode.episode_id for i in items] == [i.episode.episode_id for i in read_lerobot(DATASET)]


def test_a_v2_dataset_or_a_missing_feature_is_refused(tmp_path: Path) -> None:
    old = tmp_path / "old"
    shutil.copytree(DATASET, old)
    info = json.loads((old / "meta" / "info.json").read_text())
    (old / "meta" / "info.json").write_text(json.dumps({**info, "codebase_version": "v2.1"}))
    with pytest.raises(DatasetImportError, match="convert_dataset_v21_to_v30"):
        list(read_lerobot(old))
    with pytest.raises(DatasetImportError, match=r"no feature .observation\.effort."):
        list(read_lerobot(DATASET, state_key="observation.effort"))
    with pytest.raises(DatasetImportError, match="is not a LeRobot dataset"):
        list(read_lerobot(tmp_path))


@pytest.mark.integration
def test_import_commits_through_the_stream_job_with_instructions(
    tmp_path: Path, broker: str, stack_settings: object
) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    from deltalake import DeltaTable
    from pi_format import LakeLayout
    from pi_format.lake import AnnotationStore, read_committed, value_at
    from pi_ingest import UploaderConfig
    from pi_jobs.importing import ImportConfig, run_import

    from tests.fixtures.stream_jobs import small_stream_job

    run = uuid.uuid4().hex[:8]
    raw_topic, ack_topic = f"lr-raw-{run}", f"lr-ack-{run}"
    admin = AdminClient({"bootstrap.servers": broker})
    for future in admin.create_topics([NewTopic(raw_topic, 2, 1), NewTopic(ack_topic, 1, 1)]).values():
        future.result(timeout=10)
    job = small_stream_job(
        broker=broker,
        root=tmp_path,
        jar_dir=stack_settings.jar_dir,  # type: ignore[attr-defined]
        raw_topic=raw_topic,
        ack_topic=ack_topic,
        group_id=f"lr-{run}",
    )
    uploader = UploaderConfig(broker, tmp_path / "spool", raw_topic=raw_topic, ack_topic=ack_topic)
    config = ImportConfig(
        uploader, job.lake_root, stream=job, catalog_path=job.catalog_path, confirm_timeout_s=120
    )
    report = run_import(read_lerobot(DATASET), config, say=lambda _: None)
    assert len(report.committed) == 3 and not report.quarantined and not report.pending, report.lines()
    layout = LakeLayout(job.lake_root)
    rows = {r["episode_id"]: r for r in read_committed(layout, ["step_count", "control_rate_hz"]).to_pylist()}
    ids = sorted(report.committed)
    assert [rows[e]["step_count"] for e in ids] == list(fx.LENGTHS)
    assert {rows[e]["control_rate_hz"] for e in ids} == {10.0}
    steps = DeltaTable(layout.steps).to_pyarrow_table(
        columns=["episode_id", "step_index", "proprio", "action"]
    )
    for n, eid in enumerate(ids):
        mine = sorted((r for r in steps.to_pylist() if r["episode_id"] == eid), key=lambda r: r["step_index"])
        assert np.array_equal(
            np.array([r["proprio"] for r in mine], np.float32),
            np.stack([fx.state(n, t) for t in range(len(mine))]),
        )
        assert np.array_equal(
            np.array([r["action"] for r in mine], np.float32),
            np.stack([fx.action(n, t) for t in range(len(mine))]),
        )
    notes = AnnotationStore(layout).current(ids, kinds=["instruction"])
    assert [value_at(notes, ids[1], t, "instruction") for t in (4, 5)] == [
        "pick up the cube",
        "place it in the bowl",
    ]
    again = run_import(read_lerobot(DATASET), ImportConfig(uploader, job.lake_root), say=lambda _: None)
    assert sorted(again.already_in_lake) == ids and not again.submitted


def _frames_of(item_episode: object) -> np.ndarray:
    from pi_format import Episode

    assert isinstance(item_episode, Episode)
    return np.stack([f.to_ndarray(format="rgb24") for f in decode_container(item_episode.camera("top").data)])


def test_h264_videos_and_image_features_read_the_same(tmp_path: Path) -> None:
    """LeRobot writes AV1 by default; H.264 files (other encoders, older conversions) and `image`
    features (PNG bytes in the data parquet) carry the same frames. Both are made here from the
    lerobot-written fixture (re-encoded with PyAV, or its frames stored as PNG cells)."""
    import av
    import pyarrow as pa
    import pyarrow.parquet as pq
    from PIL import Image

    video = "videos/observation.images.top/chunk-000/file-000.mp4"
    with av.open(str(DATASET / video)) as container:
        decoded = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
    h264 = tmp_path / "h264"
    shutil.copytree(DATASET, h264)
    with av.open(str(h264 / video), mode="w") as out:
        stream = out.add_stream("libx264", rate=fx.FPS)
        stream.width, stream.height, stream.pix_fmt = fx.SIZE, fx.SIZE, "yuv420p"
        stream.options = {"crf": "12", "g": "2"}
        for i, image in enumerate(decoded):
            frame = av.VideoFrame.from_ndarray(image, format="rgb24")
            frame.pts = i
            out.mux(stream.encode(frame))
        out.mux(stream.encode())
    images = tmp_path / "images"
    shutil.copytree(DATASET, images)
    shutil.rmtree(images / "videos")
    info = json.loads((images / "meta" / "info.json").read_text())
    info["features"]["observation.images.top"]["dtype"] = "image"
    (images / "meta" / "info.json").write_text(json.dumps(info))
    data_path = images / "data" / "chunk-000" / "file-000.parquet"
    data = pq.read_table(data_path)
    cells = []
    for image in decoded:
        buffer = io.BytesIO()
        Image.fromarray(image).save(buffer, format="PNG")
        cells.append({"bytes": buffer.getvalue(), "path": None})
    pq.write_table(data.append_column("observation.images.top", pa.array(cells)), data_path)
    original = [_frames_of(i.episode) for i in read_lerobot(DATASET)]
    for variant in (h264, images):
        items = list(read_lerobot(variant))
        assert [i.episode.step_count for i in items] == list(fx.LENGTHS)
        for n, item in enumerate(items):
            assert np.array_equal(
                item.episode.action, np.stack([fx.action(n, t) for t in range(len(item.episode.action))])
            )
            assert _psnr(_frames_of(item.episode), original[n]) > 35.0, variant
