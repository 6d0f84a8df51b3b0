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
from pi_jobs.exporting import ExportError, FileLimits, export_lerobot
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


# Small limits so that files rotate: every data file holds one episode (2 files a chunk, so the
# third episode opens chunk-001); a video file holds two episodes of these (~3.3 kB each encoded)
# and the third starts a new file
SMALL = FileLimits(chunks_size=2, data_files_size_in_mb=1e-4, video_files_size_in_mb=8000 / 2**20)


@pytest.fixture(scope="module")
def rotated(exported: tuple[FakeLake, Path]) -> tuple[FakeLake, Path]:
    lake, out = exported
    small = out.parent / "mugs-v1-small-files"
    report = export_lerobot(lake.layout, "mugs-v1", small, limits=SMALL, say=lambda _: None)
    assert (report.episodes, report.frames) == (3, 42)
    return lake, small


def test_files_rotate_by_size_as_lerobots_do(rotated: tuple[FakeLake, Path]) -> None:
    from deltalake import DeltaTable
    from pi_format.video import decode_chunk_rgb

    lake, out = rotated
    info = json.loads((out / "meta" / "info.json").read_text())
    assert (info["chunks_size"], info["data_files_size_in_mb"], info["video_files_size_in_mb"]) == (
        2,
        1e-4,
        8000 / 2**20,
    )
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file() and "meta" not in p.parts)
    assert files == [
        "data/chunk-000/file-000.parquet",
        "data/chunk-000/file-001.parquet",
        "data/chunk-001/file-000.parquet",
        "videos/observation.images.front/chunk-000/file-000.mp4",
        "videos/observation.images.front/chunk-000/file-001.mp4",
        "videos/observation.images.wrist/chunk-000/file-000.mp4",
        "videos/observation.images.wrist/chunk-000/file-001.mp4",
    ]
    episodes = pq.read_table(out / "meta/episodes/chunk-000/file-000.parquet").to_pylist()
    where = [(e["data/chunk_index"], e["data/file_index"]) for e in episodes]
    assert where == [(0, 0), (0, 1), (1, 0)]
    for e, (chunk, file) in zip(episodes, where, strict=True):
        data = pq.read_table(out / f"data/chunk-{chunk:03d}/file-{file:03d}.parquet")
        assert data.column("index").to_pylist() == list(range(e["dataset_from_index"], e["dataset_to_index"]))
        assert set(data.column("episode_index").to_pylist()) == {e["episode_index"]}
    fps = info["fps"]
    for camera, k in (("front", 0), ("wrist", 1)):
        key = f"videos/observation.images.{camera}"
        got = [(e[f"{key}/chunk_index"], e[f"{key}/file_index"]) for e in episodes]
        assert got == [(0, 0), (0, 0), (0, 1)]
        # timestamps run on within a file and restart at 0 in a new one
        spans = [(e[f"{key}/from_timestamp"], e[f"{key}/to_timestamp"]) for e in episodes]
        assert spans == [(0.0, pytest.approx(14 / fps)), (pytest.approx(14 / fps), pytest.approx(28 / fps)),
                         (0.0, pytest.approx(14 / fps))]  # fmt: skip
        decoded: dict[tuple[int, int], list[np.ndarray]] = {}
        for chunk, file in set(got):
            with av.open(str(out / f"{key}/chunk-{chunk:03d}/file-{file:03d}.mp4")) as container:
                decoded[(chunk, file)] = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
        # a file of two episodes stays under the limit; each episode's frames lie at its timestamps
        assert (out / f"{key}/chunk-000/file-000.mp4").stat().st_size < SMALL.video_files_size_in_mb * 2**20
        assert [len(v) for _, v in sorted(decoded.items())] == [28, 14]
        for e, at, (start, _) in zip(episodes, got, spans, strict=True):
            eid = lake.episode_ids[e["episode_index"]]
            chunks = (
                DeltaTable(lake.layout.video).to_pyarrow_table(filters=[("episode_id", "=", eid)]).to_pylist()
            )
            stored: list[np.ndarray] = []
            attempt = lake.episodes[eid].attempt_id
            mine = (c for c in chunks if c["camera"] == camera and c["attempt_id"] == attempt)
            for chunk in sorted(mine, key=lambda c: c["chunk_index"]):
                stored.extend(decode_chunk_rgb(chunk["data"], height=24, width=32))
            shown = [stored[i] for i in lake.episodes[eid].camera_frame_index[:, k]]
            first = round(float(start) * fps)
            assert _psnr(decoded[at][first : first + 14], shown) > 35.0


def test_bad_limits_are_refused() -> None:
    with pytest.raises(ValueError, match="chunks_size must be an int >= 1"):
        FileLimits(chunks_size=0)
    with pytest.raises(ValueError, match="video_files_size_in_mb must be a number of MiB > 0"):
        FileLimits(video_files_size_in_mb=0)
    with pytest.raises(ValueError, match="data_files_size_in_mb must be a number of MiB > 0"):
        FileLimits(data_files_size_in_mb=float("inf"))


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
    # the lake's ids of each exported episode, in episode_index order
    assert [(e["episode_index"], e["pilake/episode_id"]) for e in episodes] == list(
        enumerate(lake.episode_ids)
    )
    assert all(e["pilake/attempt_id"] for e in episodes)


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


@pytest.mark.parametrize("which", ["exported", "rotated"])
def test_lerobot_opens_the_export(which: str, request: pytest.FixtureRequest) -> None:
    _need_lerobot()
    lake, out = request.getfixturevalue(which)
    script = f"""
import json, sys
sys.path.insert(0, {str(REPO / "benchmarks/loader/peers")!r})
import _compat
_compat.patch_torchvision()
from lerobot.datasets.lerobot_dataset import LeRobotDataset
ds = LeRobotDataset("pilake/export", root={str(out)!r})
items = []
for i in (3, 20, 35):
    item = ds[i]
    items.append({{"task": item["task"], "episode": int(item["episode_index"]),
                  "frame": int(item["frame_index"]),
                  "action": item["action"].numpy().tolist(),
                  "state": item["observation.state"].numpy().tolist(),
                  "front": (item["observation.images.front"].numpy() * 255).round().tolist(),
                  "wrist": (item["observation.images.wrist"].numpy() * 255).round().tolist()}})
print(json.dumps({{"frames": len(ds), "episodes": ds.num_episodes, "fps": ds.fps, "items": items}}))
"""
    done = subprocess.run([str(PEERS_PYTHON), "-c", script], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert (got["frames"], got["episodes"], got["fps"]) == (42, 3, 10)
    # frames 3, 20 and 35: episode 0 step 3, episode 1 step 6 (past "grasp the mug", steps 0-5;
    # the second episode of a video file when rotated) and episode 2 step 7 (chunk-001's data)
    for item, (n, step, task) in zip(
        got["items"], ((0, 3, "pick"), (1, 6, "place"), (2, 7, "pick")), strict=True
    ):
        episode = lake.episodes[lake.episode_ids[n]]
        assert (item["episode"], item["frame"], item["task"]) == (n, step, task)
        assert np.array_equal(np.asarray(item["action"], np.float32), episode.action[step])
        assert np.array_equal(np.asarray(item["state"], np.float32), episode.proprio[step])
        for k, camera in enumerate(("front", "wrist")):
            image = np.transpose(np.asarray(item[camera]), (1, 2, 0))  # lerobot gives CHW floats in [0, 1]
            rendered = episode.frames[camera][episode.camera_frame_index[step, k]]
            assert _psnr([image], [rendered]) > 24.0


def test_the_command_takes_the_limits(
    exported: tuple[FakeLake, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from pi_jobs.cli import main

    lake, _ = exported
    monkeypatch.setenv("PILAKE_HOME", str(tmp_path))
    monkeypatch.setenv("PILAKE_LAKE", lake.layout.root)
    out = tmp_path / "cli-export"
    args = [
        "export",
        "lerobot",
        "mugs-v1",
        str(out),
        "--chunks-size",
        "2",
        "--data-files-size-in-mb",
        "0.0001",
    ]
    assert main(args) == 0
    assert "3 episodes, 42 frames" in capsys.readouterr().out
    info = json.loads((out / "meta" / "info.json").read_text())
    assert (info["chunks_size"], info["data_files_size_in_mb"], info["video_files_size_in_mb"]) == (
        2,
        1e-4,
        200,
    )
    assert (out / "data/chunk-001/file-000.parquet").is_file()
    assert main(["export", "lerobot", "mugs-v1", str(tmp_path / "other"), "--chunks-size", "0"]) != 0
    assert "chunks_size must be an int >= 1" in capsys.readouterr().err
