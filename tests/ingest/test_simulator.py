"""Tests of the fleet simulator: determinism, realistic signals and decodable video."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from pi_format.video import decode_container
from pi_format.wire import EpisodeAssembler, decode_chunk, encode_episode, read_bundle
from pi_ingest import SimulationConfig, simulate_episode, simulate_fleet, write_fleet

# Tiny episodes keep the suite fast: 1 s, two cameras (one overhead, one wrist), 160x120.
SMALL = SimulationConfig(
    robots=2,
    episodes_per_robot=2,
    duration_s=1.0,
    camera_width=160,
    camera_height=120,
    cameras=("cam_high", "cam_left_wrist"),
    seed=7,
)


@pytest.fixture(scope="module")
def sim():  # -> SimulatedEpisode
    return simulate_episode(SMALL, 1, 1)


def test_ids_and_shapes(sim) -> None:
    ep = sim.episode
    assert ep.episode_id == "sim7-r001-e00001"
    assert ep.meta.robot_id == "sim7-r001"
    assert ep.step_count == 50
    assert ep.proprio.shape == (50, 14) and ep.proprio.dtype == np.float32
    assert ep.action.shape == (50, 14) and ep.action.dtype == np.float32
    assert ep.camera_names == ("cam_high", "cam_left_wrist")
    assert ep.meta.tags == ("sim", "aloha")
    assert ep.meta.task
    steps = np.diff(ep.timestamps_ns)
    assert steps.min() == steps.max() == 20_000_000
    assert ep.timestamps_ns[0] == ep.meta.start_time_ns
    for cam in ep.cameras:
        assert cam.frame_count == 30
        assert cam.frame_timestamps_ns[0] == ep.meta.start_time_ns
        assert np.array_equal(
            cam.frame_timestamps_ns - ep.meta.start_time_ns,
            np.round(np.arange(30) * 1e9 / 30.0).astype(np.int64),
        )
        assert sim.frames[cam.spec.name].shape == (30, 120, 160, 3)
        assert sim.frames[cam.spec.name].dtype == np.uint8


def test_deterministic_bytes(sim) -> None:
    again = simulate_episode(SMALL, 1, 1)
    assert encode_episode(again.episode) == encode_episode(sim.episode)
    for name, frames in sim.frames.items():
        assert np.array_equal(again.frames[name], frames)


def test_different_seeds_and_indices_differ(sim) -> None:
    other_seed = simulate_episode(dataclasses.replace(SMALL, seed=8), 1, 1)
    other_episode = simulate_episode(SMALL, 1, 0)
    for other in (other_seed, other_episode):
        assert other.episode.episode_id != sim.episode.episode_id
        assert not np.array_equal(other.episode.proprio, sim.episode.proprio)
        assert not np.array_equal(other.frames["cam_high"], sim.frames["cam_high"])


def test_proprio_is_smooth_and_moves(sim) -> None:
    q = sim.episode.proprio.astype(np.float64)
    first = np.abs(np.diff(q, axis=0))
    second = np.abs(np.diff(q, n=2, axis=0))
    assert first.max() > 1e-3  # it moves
    assert second.max() < 0.05  # ... smoothly: no jumps between 20 ms steps
    assert second.mean() < first.mean() / 3
    # Grippers (the last joint of each 7-joint arm) stay in [0, 1].
    assert q[:, [6, 13]].min() >= 0.0 and q[:, [6, 13]].max() <= 1.0


def test_action_leads_proprio(sim) -> None:
    q, a = sim.episode.proprio, sim.episode.action
    # The commanded target is close to where the joints go a few steps later.
    ahead = np.abs(a[:-4] - q[4:]).mean()
    assert ahead < 0.05
    assert not np.array_equal(a, q)


def test_frames_are_structured_and_move(sim) -> None:
    for name, frames in sim.frames.items():
        f = frames.astype(np.int16)
        neighbour = np.abs(np.diff(f, axis=2)).mean()
        rng = np.random.default_rng(0)
        shuffled = f[0].reshape(-1, 3)[rng.permutation(f.shape[1] * f.shape[2])]
        random_pairs = np.abs(np.diff(shuffled, axis=0)).mean()
        assert neighbour < random_pairs / 4, name  # strong spatial correlation: not noise
        assert f[0].std() > 10, name  # not a flat colour
        temporal = np.abs(np.diff(f, axis=0)).mean(axis=(1, 2, 3))
        assert temporal.mean() > 0.05, name  # things move ...
        assert temporal.max() < 25, name  # ... a little per frame


def test_cameras_have_different_views(sim) -> None:
    high, wrist = sim.frames["cam_high"], sim.frames["cam_left_wrist"]
    assert np.abs(high.astype(np.int16) - wrist.astype(np.int16)).mean() > 10


def test_mp4_decodes_to_the_frames(sim) -> None:
    for cam in sim.episode.cameras:
        decoded = [f.to_ndarray(format="rgb24") for f in decode_container(cam.data)]
        assert len(decoded) == cam.frame_count
        assert decoded[0].shape == (cam.spec.height, cam.spec.width, 3)
        original = sim.frames[cam.spec.name].astype(np.float64)
        mse = np.mean((np.stack(decoded).astype(np.float64) - original) ** 2)
        psnr = 10 * np.log10(255.0**2 / mse)
        assert psnr > 30, (cam.spec.name, psnr)


def test_single_arm_and_other_cameras() -> None:
    cfg = SimulationConfig(
        robots=1,
        episodes_per_robot=1,
        duration_s=0.5,
        camera_width=64,
        camera_height=48,
        cameras=("front", "top", "wrist"),
        proprio_dim=7,
        action_dim=9,
    )
    s = simulate_episode(cfg, 0, 0)
    assert s.episode.proprio.shape == (25, 7)
    assert s.episode.action.shape == (25, 9)
    assert set(s.frames) == {"front", "top", "wrist"}
    assert not np.array_equal(s.frames["front"], s.frames["top"])


def test_fleet_order_and_write(tmp_path: Path) -> None:
    cfg = dataclasses.replace(SMALL, duration_s=0.5, cameras=("cam_high",), camera_width=64, camera_height=48)
    ids = [s.episode.episode_id for s in simulate_fleet(cfg)]
    assert ids == ["sim7-r000-e00000", "sim7-r000-e00001", "sim7-r001-e00000", "sim7-r001-e00001"]
    paths = write_fleet(cfg, tmp_path / "out", progress=False)
    assert [p.name for p in paths] == [f"{i}.piep" for i in ids]
    messages = read_bundle(paths[2])
    asm = EpisodeAssembler(ids[2])
    for m in messages:
        asm.add(decode_chunk(m))
    ep = asm.assemble()
    expected = simulate_episode(cfg, 1, 0).episode
    assert np.array_equal(ep.proprio, expected.proprio)
    assert ep.camera("cam_high").data == expected.camera("cam_high").data


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"robots": 0}, "robots must be an integer >= 1"),
        ({"episodes_per_robot": 1.5}, "episodes_per_robot must be an integer >= 1"),
        ({"robots": 1001}, "robots must be <= 1000"),
        ({"duration_s": 0.0}, "duration_s must be a finite number > 0"),
        ({"control_rate_hz": float("nan")}, "control_rate_hz must be a finite number > 0"),
        ({"camera_fps": -1.0}, "camera_fps must be a finite number > 0"),
        ({"duration_s": 0.01}, "at least one frame"),
        ({"camera_width": 161}, "camera_width must be an even integer >= 16"),
        ({"camera_height": 8}, "camera_height must be an even integer >= 16"),
        ({"cameras": ("a", "a")}, "cameras must be unique"),
        ({"cameras": ("bad name",)}, "camera name must be"),
        ({"proprio_dim": 2}, "proprio_dim must be an integer >= 3"),
        ({"action_dim": 0}, "action_dim must be an integer >= 1"),
        ({"robot_type": ""}, "robot_type must be"),
        ({"seed": -1}, "seed must be an integer >= 0"),
    ],
)
def test_config_validation(changes: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        dataclasses.replace(SMALL, **changes)


def test_config_cameras_type() -> None:
    with pytest.raises(TypeError, match="cameras must be a tuple"):
        SimulationConfig(cameras=["cam_high"])  # type: ignore[arg-type]


def test_index_out_of_range() -> None:
    with pytest.raises(ValueError, match=r"robot_index must be in \[0, 2\)"):
        simulate_episode(SMALL, 2, 0)
    with pytest.raises(ValueError, match=r"episode_index must be in \[0, 2\)"):
        simulate_episode(SMALL, 0, -1)
