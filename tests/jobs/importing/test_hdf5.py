"""`pilake import hdf5`: the robomimic, ALOHA and mapping-file layouts read into fleet episodes
(unit tests, no broker), and one integration run through the broker and the stream job."""

from __future__ import annotations

import uuid
from pathlib import Path

import h5py
import numpy as np
import pytest
from pi_format.video import decode_container
from pi_jobs.importing import DatasetImportError, Hdf5Mapping, ImportOptions, read_hdf5

from tests.fixtures.hdf5_files import frames, write_aloha, write_robomimic


def test_robomimic_layout_is_read_demo_by_demo(tmp_path: Path) -> None:
    path = write_robomimic(tmp_path / "lift.hdf5", demos=3, steps=10)
    items = list(read_hdf5(path))
    assert [i.episode.step_count for i in items] == [10, 11, 12]
    ids = [i.episode.episode_id for i in items]
    assert [e.rsplit("-", 1)[-1] for e in ids] == ["demo_0", "demo_1", "demo_2"]
    assert ids == [i.episode.episode_id for i in read_hdf5(path)]  # deterministic
    with h5py.File(path) as f:
        demo = f["data/demo_1"]
        want = np.concatenate([demo["obs/robot0_eef_pos"][()], demo["obs/robot0_gripper_qpos"][()]], axis=1)
        ep = items[1].episode
        assert np.array_equal(ep.proprio, want.astype(np.float32))
        assert np.array_equal(ep.action, demo["actions"][()].astype(np.float32))
    assert ep.meta.control_rate_hz == 20.0 and ep.meta.task == "Lift" and ep.meta.robot_type == "franka"
    assert ep.camera_names == ("agentview",)
    step = np.diff(ep.timestamps_ns)
    assert set(step.tolist()) == {50_000_000}
    assert items[0].annotations[0].value == "Lift" and items[0].annotations[0].end == 10


def test_aloha_layout_keeps_the_frames_within_the_codec(tmp_path: Path) -> None:
    path = write_aloha(tmp_path / "episode_7.hdf5", steps=12, seed=3)
    (item,) = list(read_hdf5(path, task="transfer the cube"))
    ep = item.episode
    assert ep.meta.robot_type == "aloha" and ep.meta.control_rate_hz == 50.0 and ep.proprio_dim == 14
    assert ep.meta.task == "transfer the cube" and item.annotations[0].kind == "instruction"
    decoded = np.stack([f.to_ndarray(format="rgb24") for f in decode_container(ep.camera("top").data)])
    # a 4:3 camera is letterboxed to the lake's 1:1 by default (4-row black bars), and says so
    assert decoded.shape == (12, 32, 32, 3) and decoded[:, :3].mean() < 8 and decoded[:, 29:].mean() < 8
    assert "resize:letterbox" in ep.meta.tags and "camera-size:top=32x24" in ep.meta.tags
    decoded = decoded[:, 4:28]
    # H.264 at crf 18 in yuv420p (chroma at half resolution, BT.601 limited range): within the
    # codec's tolerance, not equal
    error = decoded.astype(float) - frames(12, 24, 32, 3).astype(float)
    psnr = 10 * np.log10(255.0**2 / np.mean(error**2))
    assert psnr > 30.0 and np.abs(error).mean() < 6.0, (psnr, np.abs(error).mean())


def test_compressed_aloha_recordings_are_decoded(tmp_path: Path) -> None:
    path = write_aloha(tmp_path / "episode_3.hdf5", steps=8, seed=2, compress=True)
    (item,) = list(read_hdf5(path, options=ImportOptions(resize="stretch")))
    assert "resize:stretch" in item.episode.meta.tags
    decoded = np.stack(
        [f.to_ndarray(format="rgb24") for f in decode_container(item.episode.camera("top").data)]
    )
    error = decoded.astype(float) - frames(8, 24, 32, 2).astype(float)
    assert decoded.shape == (8, 24, 32, 3) and 10 * np.log10(255.0**2 / np.mean(error**2)) > 28.0


def test_a_mapping_file_reads_any_layout(tmp_path: Path) -> None:
    path = tmp_path / "custom.h5"
    with h5py.File(path, "w") as f:
        for k in range(2):
            g = f.create_group(f"runs/run{k}")
            g.create_dataset("state/joints", data=np.full((6, 4), k, np.float32))
            g.create_dataset("cmd", data=np.ones((6, 2), np.float32))
            g.create_dataset("cam/wrist", data=frames(6, 16, 16, k))
    mapping = tmp_path / "map.toml"
    mapping.write_text(
        'episodes = "runs/*"\nproprio = ["state/joints"]\naction = "cmd"\nfps = 15.0\n'
        'robot_type = "ur5e"\ntask = "wipe"\n[cameras]\nwrist = "cam/wrist"\n'
    )
    items = list(read_hdf5(path, mapping=Hdf5Mapping.from_toml(mapping)))
    assert [i.episode.meta.robot_type for i in items] == ["ur5e", "ur5e"]
    assert items[1].episode.proprio[0, 0] == 1.0 and items[1].episode.camera_names == ("wrist",)
    mapping.write_text(
        'episodes = "runs/*"\nproprio = ["state/nope"]\naction = "cmd"\nfps = 15.0\nrobot_type = "x"\n'
    )
    with pytest.raises(DatasetImportError, match="no dataset 'state/nope'"):
        list(read_hdf5(path, mapping=Hdf5Mapping.from_toml(mapping)))
    mapping.write_text('proprio = "a"\naction = "b"\nfps = 1\nrobot_type = "x"\ncolour = 1\n')
    with pytest.raises(ValueError, match="unknown keys \\['colour'\\]"):
        Hdf5Mapping.from_toml(mapping)


def test_an_unknown_layout_says_to_write_a_mapping(tmp_path: Path) -> None:
    path = tmp_path / "odd.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=np.zeros(3))
    with pytest.raises(DatasetImportError, match=r"pass --mapping FILE\.toml"):
        list(read_hdf5(path))
    (tmp_path / "not.h5").write_bytes(b"nope")
    with pytest.raises(DatasetImportError, match="cannot be opened as HDF5"):
        list(read_hdf5(tmp_path / "not.h5"))


@pytest.mark.integration
def test_import_goes_through_the_broker_and_the_stream_job_once(
    tmp_path: Path, broker: str, stack_settings: object
) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    from deltalake import DeltaTable
    from pi_format import LakeLayout
    from pi_format.lake import AnnotationStore, read_committed
    from pi_ingest import UploaderConfig
    from pi_jobs.importing import ImportConfig, run_import

    from tests.fixtures.stream_jobs import small_stream_job

    run = uuid.uuid4().hex[:8]
    raw_topic, ack_topic = f"imp-raw-{run}", f"imp-ack-{run}"
    admin = AdminClient({"bootstrap.servers": broker})
    for future in admin.create_topics([NewTopic(raw_topic, 2, 1), NewTopic(ack_topic, 1, 1)]).values():
        future.result(timeout=10)
    robomimic = write_robomimic(tmp_path / "lift.hdf5", demos=2, steps=12)
    bad = write_robomimic(tmp_path / "bad.hdf5", demos=1, steps=12, seed=1, nan_in=0)
    aloha = write_aloha(tmp_path / "episode_0.hdf5", steps=14)
    job = small_stream_job(
        broker=broker,
        root=tmp_path,
        jar_dir=stack_settings.jar_dir,  # type: ignore[attr-defined]
        raw_topic=raw_topic,
        ack_topic=ack_topic,
        group_id=f"imp-{run}",
    )
    config = ImportConfig(
        UploaderConfig(broker, tmp_path / "spool", raw_topic=raw_topic, ack_topic=ack_topic),
        lake_root=job.lake_root,
        stream=job,
        catalog_path=job.catalog_path,
        confirm_timeout_s=120,
        idle_timeout_s=2.0,
    )
    said: list[str] = []

    def episodes():
        for path in (robomimic, bad, aloha):
            yield from read_hdf5(path)

    report = run_import(episodes(), config, say=said.append)
    assert len(report.committed) == 3 and not report.pending, report.lines()
    (quarantined,) = report.quarantined
    assert quarantined.startswith("bad-") and report.quarantined[quarantined].startswith("bad_values")
    assert any("episodes/s" in line and "MB/s" in line for line in said)
    layout = LakeLayout(job.lake_root)
    rows = read_committed(layout, ["step_count", "control_rate_hz", "proprio_dim", "cameras"])
    by_id = {r["episode_id"]: r for r in rows.to_pylist()}
    demo1 = next(e for e in report.committed if e.endswith("demo_1"))
    assert by_id[demo1]["step_count"] == 13 and by_id[demo1]["control_rate_hz"] == 20.0
    steps = DeltaTable(layout.steps).to_pyarrow_table(
        columns=["episode_id", "step_index", "proprio", "action"]
    )
    mine = sorted((r for r in steps.to_pylist() if r["episode_id"] == demo1), key=lambda r: r["step_index"])
    with h5py.File(robomimic) as f:
        demo = f["data/demo_1"]
        want = np.concatenate([demo["obs/robot0_eef_pos"][()], demo["obs/robot0_gripper_qpos"][()]], axis=1)
        assert np.array_equal(np.array([r["proprio"] for r in mine], np.float32), want.astype(np.float32))
        assert np.array_equal(
            np.array([r["action"] for r in mine], np.float32), demo["actions"][()].astype(np.float32)
        )
    instructions = AnnotationStore(layout).current(kinds=["instruction"])
    assert sorted(set(instructions.column("value").to_pylist())) == ["Lift"] and instructions.num_rows == 2
    # a rerun imports nothing twice: everything committed is skipped before encoding
    again = run_import(episodes(), ImportConfig(config.uploader, lake_root=job.lake_root), say=said.append)
    assert sorted(again.already_in_lake) == sorted(report.committed) and again.submitted == [quarantined]


def test_the_command_parses() -> None:
    from pi_jobs.cli import build_parser

    args = build_parser().parse_args(["import", "hdf5", "a.hdf5", "b.hdf5", "--fps", "10", "--no-stream"])
    assert args.files == ["a.hdf5", "b.hdf5"] and args.fps == 10.0 and args.no_stream and callable(args.func)
