"""The loader benchmark's own machinery: measuring loop, lake reading, export, raw-limit leg.

The peers (lerobot, Mosaic) run in their own venv and are exercised by the benchmark itself;
these tests cover what the figures rest on, on a small lake from the factory (no timing asserts).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from benchmarks.loader import _legs
from benchmarks.loader._data import DataConfig, export_episodes, read_lake
from benchmarks.loader._timing import measure
from tests.fixtures.lake_factory import FakeLake, write_lake

CAMERAS = ("front", "wrist")


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> FakeLake:
    root = tmp_path_factory.mktemp("bench-lake")
    return write_lake(root / "lake", episodes=3, steps=12, cameras=CAMERAS, size=(32, 32))


def test_measure_counts_warmup_then_window_and_restarts_epochs() -> None:
    epochs: list[int] = []

    def batches() -> list[list[int]]:
        epochs.append(1)
        return [[0] * 4] * 5  # 5 batches of 4 samples per epoch

    result = measure(
        batches,
        batch_len=len,
        spawned_at=0.0,
        opened_at=0.0,
        warmup_batches=2,
        measure_s=0.05,
        check=lambda b: {"first": len(b)},
    )
    assert result["warmup_samples"] == 8
    assert result["first_batch"] == {"first": 4}
    # the window runs past the first epoch's 3 remaining batches into new epochs
    assert result["epochs_started_while_measuring"] == len(epochs) - 1 >= 1
    assert result["measured_samples"] % 4 == 0 and result["measured_samples"] > 12
    assert result["samples_per_s"] > 0
    assert result["cpu_ms_per_sample"] is not None and result["cpu_ms_per_sample"] >= 0


def test_read_lake_returns_committed_episodes_only(lake: FakeLake) -> None:
    episodes = read_lake(Path(lake.layout.root))
    assert [e.episode_id for e in episodes] == lake.episode_ids  # garbage attempts left out
    for ep in episodes:
        fake = lake.episodes[ep.episode_id]
        np.testing.assert_array_equal(ep.state, fake.proprio)
        np.testing.assert_array_equal(ep.action, fake.action)
        np.testing.assert_array_equal(ep.camera_frame_index, fake.camera_frame_index)
        for k, camera in enumerate(CAMERAS):
            frames = sum(int(c["frame_count"]) for c in ep.chunks[camera])  # type: ignore[call-overload]
            assert frames == int(fake.camera_frame_index[:, k].max()) + 1


def test_export_holds_the_pixels_pi_loader_returns(lake: FakeLake, tmp_path: Path) -> None:
    from pi_loader import Dataset

    config = DataConfig(episodes=3, duration_s=1.2, rate_hz=10.0, size_px=32)
    out = export_episodes(config, Path(lake.layout.root), tmp_path)
    files = sorted(out.glob("*.npz"))
    assert len(files) == 3
    ds = Dataset(lake.layout.root, action_horizon=1)
    exported = {f.stem.split("_", 1)[1]: np.load(f) for f in files}
    for i in range(0, len(ds), 5):
        episode_id, step = ds.locate(i)
        sample = ds[i]
        for camera in CAMERAS:
            np.testing.assert_array_equal(
                exported[episode_id][f"frames_{camera}"][step],
                np.asarray(sample[f"observation.images.{camera}"]),
            )
        np.testing.assert_array_equal(
            exported[episode_id]["state"][step], np.asarray(sample["observation.state"])
        )


@pytest.mark.parametrize("chunk_cache", [0, 4])
def test_raw_leg_decodes_every_camera_of_a_batch(lake: FakeLake, chunk_cache: int) -> None:
    total = _legs._load_raw(Path(lake.layout.root), seed=0, chunk_cache=chunk_cache)
    assert total == 3 * 12
    samples, decodes = _legs._raw_batch((0, 8))
    assert samples == 8
    # 8 samples x 2 cameras need 16 frames: without a cache each is its own decode
    assert decodes == 16 if chunk_cache == 0 else 1 <= decodes <= 16
    samples, _ = _legs._raw_batch((4, 8))  # the last, short batch
    assert samples == total - 4 * 8


def test_decode_until_gives_the_frame_a_full_decode_gives(lake: FakeLake) -> None:
    from pi_format.video import decode_chunk_yuv

    chunk = read_lake(Path(lake.layout.root))[0].chunks["front"][0]
    full = decode_chunk_yuv(chunk["data"])  # type: ignore[arg-type]
    assert len(full) > 1
    for offset in range(len(full)):
        np.testing.assert_array_equal(_legs._decode_until(chunk["data"], offset), full[offset])  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="decoded to"):
        _legs._decode_until(chunk["data"], len(full))  # type: ignore[arg-type]


def test_pyav_rgb24_is_within_a_few_levels_of_pi_formats_conversion(lake: FakeLake) -> None:
    from pi_format.video import decode_chunk_yuv, yuv420p_to_rgb

    chunk = read_lake(Path(lake.layout.root))[0].chunks["front"][0]
    planes = decode_chunk_yuv(chunk["data"])  # type: ignore[arg-type]
    rgb = _legs._decode_until(chunk["data"], 1, rgb24=True)  # type: ignore[arg-type]
    ours = yuv420p_to_rgb(planes[1], 32, 32)
    assert rgb.shape == ours.shape == (32, 32, 3)
    # swscale rounds and upsamples chroma its own way: the headroom leg is the same picture
    assert np.abs(rgb.astype(int) - ours.astype(int)).max() <= 8


@pytest.mark.parametrize("lean", [False, True])
def test_pi_loader_leg_yields_full_samples(lake: FakeLake, lean: bool) -> None:
    loader, samples, api = _legs.open_pi_loader(
        lake.layout.root, workers=0, batch_size=5, horizon=4, seed=0, lean=lean
    )
    assert samples == 36 and "pi_loader" in api
    batch = next(iter(loader))
    for camera in CAMERAS:
        assert np.asarray(batch[f"observation.images.{camera}"]).shape == (5, 32, 32, 3)
    assert np.asarray(batch["action"]).shape == (5, 4, 2)
    close = getattr(loader, "close", None)
    if close is not None:
        close()


def test_a_leg_process_reports_rate_and_peak_memory(lake: FakeLake) -> None:
    from benchmarks.loader.run import ROOT, run_leg

    command = [sys.executable, "-m", "benchmarks.loader._legs", "raw", "--lake", lake.layout.root]
    result = run_leg(
        [*command, "--workers", "1", "--batch-size", "4", "--warmup-batches", "1", "--measure-s", "0.3"],
        timeout_s=120,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "OPENBLAS_NUM_THREADS": "1"},
    )
    assert "error" not in result, result.get("error")
    assert result["measured_samples"] > 0 and result["samples_per_s"] > 0
    assert result["peak_memory_mb"] > 10  # a Python process tree with numpy and PyAV loaded
    assert result["dataset_samples"] == 36
