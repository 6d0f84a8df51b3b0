"""The episode model: what a robot records and uploads, before anything is featurized.

An episode is a fixed-rate stream of steps (timestamps, proprio, action) plus one compressed
video stream per camera with its own frame timestamps. This is the unit the uploader sends,
the stream job validates, and the lake stores.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$")


def check_name(field: str, value: str) -> None:
    """Raise ValueError unless `value` is a safe identifier (letters, digits, `_.-`, <=128)."""
    if not isinstance(value, str) or not _NAME_RE.match(value):
        raise ValueError(
            f"{field} must be 1-128 chars of letters, digits, '_', '.', '-' "
            f"starting with a letter or digit, got {value!r}"
        )


@dataclass(frozen=True, slots=True)
class CameraSpec:
    """How one camera's video is encoded on the robot.

    Example:
        >>> CameraSpec(name="cam_high", codec="h264", container="mp4", width=320, height=240, fps=30.0)
    """

    name: str
    codec: str
    container: str
    width: int
    height: int
    fps: float

    def __post_init__(self) -> None:
        check_name("camera name", self.name)
        if self.width <= 0 or self.height <= 0 or self.width % 2 or self.height % 2:
            raise ValueError(
                f"camera {self.name}: width and height must be positive and even, "
                f"got {self.width}x{self.height}"
            )
        if not (self.fps > 0 and math.isfinite(self.fps)):
            raise ValueError(f"camera {self.name}: fps must be > 0, got {self.fps}")


@dataclass(frozen=True, slots=True, eq=False)
class CameraVideo:
    """One camera's compressed video (`data`, a whole container file) and its frame times."""

    spec: CameraSpec
    frame_timestamps_ns: np.ndarray  # int64 [frame_count]
    data: bytes

    @property
    def frame_count(self) -> int:
        return int(self.frame_timestamps_ns.shape[0])


@dataclass(frozen=True, slots=True)
class EpisodeMeta:
    """Descriptive fields of an episode; `episode_id` is globally unique and the Kafka key.

    Example:
        >>> EpisodeMeta(episode_id="r1-000001", robot_id="r1", robot_type="aloha",
        ...             task="put the cube in the bowl", start_time_ns=0,
        ...             control_rate_hz=50.0, success=True, tags=("sim",))
    """

    episode_id: str
    robot_id: str
    robot_type: str
    task: str
    start_time_ns: int
    control_rate_hz: float
    success: bool
    tags: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        check_name("episode_id", self.episode_id)
        check_name("robot_id", self.robot_id)
        check_name("robot_type", self.robot_type)
        if not (self.control_rate_hz > 0 and math.isfinite(self.control_rate_hz)):
            raise ValueError(f"control_rate_hz must be > 0, got {self.control_rate_hz}")
        if not isinstance(self.tags, tuple):
            raise TypeError(f"tags must be a tuple of str, got {type(self.tags).__name__}")


@dataclass(frozen=True, slots=True, eq=False)
class Episode:
    """A whole recorded episode.

    Arrays: `timestamps_ns` int64 [T], `proprio` float32 [T, D], `action` float32 [T, A].

    Example:
        >>> ep = Episode(meta, timestamps_ns, proprio, action, cameras=(cam,))
        >>> ep.step_count
        200
    """

    meta: EpisodeMeta
    timestamps_ns: np.ndarray
    proprio: np.ndarray
    action: np.ndarray
    cameras: tuple[CameraVideo, ...]

    def __post_init__(self) -> None:
        t = self.timestamps_ns
        if t.dtype != np.int64 or t.ndim != 1 or t.shape[0] == 0:
            raise ValueError(f"timestamps_ns must be a non-empty int64 vector, got {t.dtype}{t.shape}")
        for field, arr in (("proprio", self.proprio), ("action", self.action)):
            if arr.dtype != np.float32 or arr.ndim != 2 or arr.shape[0] != t.shape[0]:
                raise ValueError(
                    f"{field} must be float32 [{t.shape[0]}, D] to match timestamps_ns, "
                    f"got {arr.dtype}{arr.shape}"
                )
        names = [c.spec.name for c in self.cameras]
        if len(set(names)) != len(names):
            raise ValueError(f"camera names must be unique, got {names}")

    @property
    def episode_id(self) -> str:
        return self.meta.episode_id

    @property
    def step_count(self) -> int:
        return int(self.timestamps_ns.shape[0])

    @property
    def proprio_dim(self) -> int:
        return int(self.proprio.shape[1])

    @property
    def action_dim(self) -> int:
        return int(self.action.shape[1])

    def camera(self, name: str) -> CameraVideo:
        """Return the camera called `name`; KeyError names the cameras there are."""
        for cam in self.cameras:
            if cam.spec.name == name:
                return cam
        raise KeyError(f"no camera {name!r} in episode {self.episode_id}; have {self.camera_names}")

    @property
    def camera_names(self) -> tuple[str, ...]:
        return tuple(c.spec.name for c in self.cameras)
