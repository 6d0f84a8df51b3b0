"""The episode model: every validation branch, and the accessors."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from pi_format import CameraSpec, CameraVideo, Episode, EpisodeMeta
from pi_format.episode import check_name

from tests.strategies import episode_metas, episodes


def _meta(**changes: object) -> EpisodeMeta:
    base: dict[str, object] = {
        "episode_id": "r1-000001",
        "robot_id": "r1",
        "robot_type": "aloha",
        "task": "stack",
        "start_time_ns": 0,
        "control_rate_hz": 50.0,
        "success": True,
        "tags": ("sim",),
    }
    return EpisodeMeta(**{**base, **changes})  # type: ignore[arg-type]


def _spec(**changes: object) -> CameraSpec:
    base: dict[str, object] = {
        "name": "cam_high",
        "codec": "h264",
        "container": "mp4",
        "width": 64,
        "height": 48,
        "fps": 30.0,
    }
    return CameraSpec(**{**base, **changes})  # type: ignore[arg-type]


def _camera(name: str = "cam_high", frames: int = 3) -> CameraVideo:
    return CameraVideo(_spec(name=name), np.arange(frames, dtype=np.int64), b"video")


def _episode(**changes: object) -> Episode:
    steps = 4
    base: dict[str, object] = {
        "meta": _meta(),
        "timestamps_ns": np.arange(steps, dtype=np.int64),
        "proprio": np.zeros((steps, 3), np.float32),
        "action": np.zeros((steps, 2), np.float32),
        "cameras": (_camera(),),
    }
    return Episode(**{**base, **changes})  # type: ignore[arg-type]


@pytest.mark.parametrize("value", ["", "-x", "_x", "a b", "a/b", "é", "a" * 129, None, 5])
def test_check_name_rejects(value: object) -> None:
    with pytest.raises(ValueError, match="field must be 1-128 chars"):
        check_name("field", value)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", ["a", "0", "r1-000001", "a.b_c-d", "a" * 128])
def test_check_name_accepts(value: str) -> None:
    check_name("field", value)


@pytest.mark.parametrize("field", ["episode_id", "robot_id", "robot_type"])
def test_meta_names_checked(field: str) -> None:
    with pytest.raises(ValueError, match=f"{field} must be 1-128 chars"):
        _meta(**{field: "bad id"})


@pytest.mark.parametrize("rate", [0.0, -1.0, float("inf"), float("nan")])
def test_meta_control_rate(rate: float) -> None:
    with pytest.raises(ValueError, match="control_rate_hz must be > 0"):
        _meta(control_rate_hz=rate)


def test_meta_tags_must_be_tuple() -> None:
    with pytest.raises(TypeError, match="tags must be a tuple of str, got list"):
        _meta(tags=["sim"])


def test_meta_is_frozen_and_comparable() -> None:
    assert _meta() == _meta()
    with pytest.raises(dataclasses.FrozenInstanceError):
        _meta().task = "x"  # type: ignore[misc]


@pytest.mark.parametrize(("w", "h"), [(0, 48), (64, 0), (-2, 48), (63, 48), (64, 47)])
def test_camera_size(w: int, h: int) -> None:
    with pytest.raises(ValueError, match="width and height must be positive and even"):
        _spec(width=w, height=h)


@pytest.mark.parametrize("fps", [0.0, -30.0, float("inf"), float("nan")])
def test_camera_fps(fps: float) -> None:
    with pytest.raises(ValueError, match="fps must be > 0"):
        _spec(fps=fps)


def test_camera_name() -> None:
    with pytest.raises(ValueError, match="camera name must be 1-128 chars"):
        _spec(name="cam/high")


@pytest.mark.parametrize(
    "timestamps",
    [np.arange(4, dtype=np.int32), np.zeros((4, 1), np.int64), np.zeros(0, np.int64), np.zeros(4)],
)
def test_episode_timestamps(timestamps: np.ndarray) -> None:
    with pytest.raises(ValueError, match="timestamps_ns must be a non-empty int64 vector"):
        _episode(timestamps_ns=timestamps)


@pytest.mark.parametrize("field", ["proprio", "action"])
@pytest.mark.parametrize(
    "array", [np.zeros((4, 3), np.float64), np.zeros((3, 3), np.float32), np.zeros(4, np.float32)]
)
def test_episode_arrays(field: str, array: np.ndarray) -> None:
    with pytest.raises(ValueError, match=rf"{field} must be float32 \[4, D\] to match timestamps_ns"):
        _episode(**{field: array})


def test_episode_camera_names_unique() -> None:
    with pytest.raises(ValueError, match="camera names must be unique"):
        _episode(cameras=(_camera("a"), _camera("a")))


def test_episode_accessors() -> None:
    ep = _episode(cameras=(_camera("a", 2), _camera("b", 5)))
    assert (ep.episode_id, ep.step_count, ep.proprio_dim, ep.action_dim) == ("r1-000001", 4, 3, 2)
    assert ep.camera_names == ("a", "b")
    assert ep.camera("b").frame_count == 5
    with pytest.raises(KeyError, match=r"no camera 'c' in episode r1-000001; have \('a', 'b'\)"):
        ep.camera("c")


def test_zero_width_arrays_are_allowed() -> None:
    ep = _episode(proprio=np.zeros((4, 0), np.float32), cameras=())
    assert ep.proprio_dim == 0 and ep.camera_names == ()


@settings(max_examples=30, deadline=None)
@given(episode_metas())
def test_generated_metas_are_valid(meta: EpisodeMeta) -> None:
    assert dataclasses.replace(meta) == meta


@settings(max_examples=30, deadline=None)
@given(episodes())
def test_generated_episodes_are_valid(ep: Episode) -> None:
    assert ep.step_count == ep.proprio.shape[0] == ep.action.shape[0]
    assert len(set(ep.camera_names)) == len(ep.cameras)
