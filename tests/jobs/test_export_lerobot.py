"""`pilake export lerobot`: a pin written as a LeRobot v3 dataset. The layout, values and video
are checked here in CI; `LeRobotDataset` itself opens the export where lerobot is installed (the
peers environment of benchmarks/loader), skipped with the reason elsewhere."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import av
import numpy as np
import pyarrow.parquet as pq
import pytest
from pi_format.lake import Annotation, AnnotationStore
from pi_jobs.exporting import ExportError, export_lerobot
from pi_jobs.maintenance.datasets import create_dataset

from tests.fixtures.lake_factory import FakeLake, write_lake

REPO = Path(__file__).resolve().parents[2]
PEERS_PYTHON = REPO / "benchmarks" / "loader" / ".venv-peers" / "bin" / "python"


def _need_lerobot() -> None:
    """Skip (with the reason) where lerobot's environment is not installed: CI has none."""
    if not PEERS_PYTHON.exists():
        pytest.skip("lerobot is not installed here (bash benchmarks/loader/setup_peers.sh makes its venv)")
    probe = (
        f"import sys; sys.path.insert(0, {str(REPO / 'benchmarks/loader/peers')!r}); import _compat; "
        "_compat.patch_torchvision(); import lerobot.datasets.lerobot_dataset"
    )
    done = subprocess.run([str(PEERS_PYTHON), "-c", probe], capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        pytest.skip(f"lerobot does not import in {PEERS_PYTHON}: {done.stderr.strip().splitlines()[-1:]}")


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[FakeLake, Path]:
    root = tmp_path_factory.mktemp("export")
    lake = write_lake(root / "lake", episodes=3, steps=14, cameras=("front", "wrist"), size=(32, 24), group=2)
    store = AnnotationStore(lake.layout)
    store.append(
        [
            Annotation(
                "ep-001", lake.episodes["ep-001"].attempt_id, 0, 6, "instruction", "grasp the mug", source="t"
            )
        ]
    )
    create_dataset(lake.layout, "mugs-v1", episode_ids=["ep-000", "ep-001", "ep-002"])
    out = root / "mugs-v1-lerobot"
    report = export_lerobot(lake.layout, "mugs-v1", out, say=lambda _: None)
    assert (report.episodes, report.frames, report.cameras) == (3, 42, ("front", "wrist"))
    return lake, out


def test_the_layout_is_lerobots_v3(exported: tuple[FakeLake, Path]) -> None:
    lake, out = exported
    info = json.loads((out / "meta" / "info.json").read_text())
    assert info["codebase_version"] == "v3.0" and info["total_episodes"] == 3 and info["total_frames"] == 42
    for path in (
        "data/chunk-000/file-000.parquet",
        "meta/episodes/chunk-000/file-000.parquet",
        "meta/tasks.parquet",
        "meta/stats.json",
        "videos/observation.images.front/chunk-000/file-000.mp4",
        "videos/observation.images.wrist/chunk-000/file-000.mp4",
    ):
        assert (out / path).is_file(), path
    data = pq.read_table(out / "data/chunk-000/file-000.parquet")
    assert data.column_names == [
        "observation.state",
        "action",
        "timestamp",
        "frame_index",
        "episode_index",
        "index",
        "task_index",
    ]
    for n, eid in enumerate(lake.episode_ids):
        mine = data.filter(data.column("episode_index").to_numpy() == n)
        assert np.array_equal(
            np.asarray(mine.column("observation.state").to_pylist(), np.float32), lake.episodes[eid].proprio
        )
        assert np.array_equal(
            np.asarray(mine.column("action").to_pylist(), np.float32), lake.episodes[eid].action
        )
    import pandas as pd  # type: ignore[import-untyped]

    tasks = pd.read_parquet(out / "meta/tasks.parquet")  # as lerobot's load_tasks reads it
    by_index = {int(i): str(task) for task, i in zip(tasks.index, tasks["task_index"], strict=True)}
    ep1 = data.filter(data.column("episode_index").to_numpy() == 1).column("task_index").to_pylist()
    assert [by_index[i] for i in ep1] == ["grasp the mug"] * 6 + ["place"] * 8
    episodes = pq.read_table(out / "meta/episodes/chunk-000/file-000.parquet").to_pylist()
    assert [e["length"] for e in episodes] == [14, 14, 14]
    assert episodes[2]["videos/observation.images.wrist/from_timestamp"] == pytest.approx(28 / info["fps"])
    assert episodes[1]["tasks"] == ["grasp the mug", "place"]


def _psnr(a: list[np.ndarray], b: list[np.ndarray]) -> float:
    error = np.stack(a).astype(float) - np.stack(b).astype(float)
    return float(10 * np.log10(255.0**2 / np.mean(error**2)))


def test_frames_are_the_lakes_within_the_codec(exported: tuple[FakeLake, Path]) -> None:
    from deltalake import DeltaTable
    from pi_format.video import decode_chunk_rgb

    lake, out = exported
    with av.open(str(out / "videos/observation.images.wrist/chunk-000/file-000.mp4")) as container:
        frames = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
    assert len(frames) == 42
    episode = lake.episodes["ep-002"]
    rendered = [episode.frames["wrist"][i] for i in episode.camera_frame_index[:, 1]]
    chunks = (
        DeltaTable(lake.layout.video).to_pyarrow_table(filters=[("episode_id", "=", "ep-002")]).to_pylist()
    )
    stored: list[np.ndarray] = []
    for chunk in sorted((c for c in chunks if c["camera"] == "wrist"), key=lambda c: c["chunk_index"]):
        stored.extend(decode_chunk_rgb(chunk["data"], height=24, width=32))
    in_lake = [stored[i] for i in episode.camera_frame_index[:, 1]]
    # one more H.264 generation (crf 18) than the lake's own frames: close to them, and as close
    # to what was recorded as the lake is, within a dB or two
    assert _psnr(frames[28:42], in_lake) > 35.0
    assert _psnr(frames[28:42], rendered) > _psnr(in_lake, rendered) - 2.0


def test_a_pin_of_mixed_shapes_is_refused(tmp_path: Path) -> None:
    lake = write_lake(tmp_path / "lake", episodes=2, steps=6, cameras=("front",), size=(16, 16))
    create_dataset(lake.layout, "all", episode_ids=lake.episode_ids)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "x").write_text("")
    with pytest.raises(ExportError, match="is not empty"):
        export_lerobot(lake.layout, "all", tmp_path / "out")


def test_lerobot_opens_the_export(exported: tuple[FakeLake, Path]) -> None:
    _need_lerobot()
    lake, out = exported
    script = f"""
import json, sys
sys.path.insert(0, {str(REPO / "benchmarks/loader/peers")!r})
import _compat
_compat.patch_torchvision()
from lerobot.datasets.lerobot_dataset import LeRobotDataset
ds = LeRobotDataset("pilake/export", root={str(out)!r})
item = ds[20]
print(json.dumps({{"frames": len(ds), "episodes": ds.num_episodes, "fps": ds.fps, "task": item["task"],
                  "action": item["action"].numpy().tolist(),
                  "state": item["observation.state"].numpy().tolist(),
                  "front": (item["observation.images.front"].numpy() * 255).round().tolist()}}))
"""
    done = subprocess.run([str(PEERS_PYTHON), "-c", script], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert (got["frames"], got["episodes"], got["fps"]) == (42, 3, 10)
    episode = lake.episodes["ep-001"]  # frame 20 is its step 6: past "grasp the mug" (steps 0-5)
    assert got["task"] == "place"
    assert np.array_equal(np.asarray(got["action"], np.float32), episode.action[6])
    assert np.array_equal(np.asarray(got["state"], np.float32), episode.proprio[6])
    front = np.transpose(np.asarray(got["front"]), (1, 2, 0))  # lerobot gives CHW floats in [0, 1]
    rendered = episode.frames["front"][episode.camera_frame_index[6, 0]]
    assert _psnr([front], [rendered]) > 24.0
