"""Small episodes that pass or break one rule of the ingest contract each (tests only)."""

from __future__ import annotations

import uuid

import numpy as np
from pi_format import CameraSpec, CameraVideo, Episode, EpisodeMeta
from pi_format.video import encode_mp4

RATE_HZ = 15.0
FPS = 10.0


def make_episode(
    tag: str,
    *,
    seed: int = 0,
    robot_type: str = "aloha",
    steps: int = 16,
    frames: int = 6,
    video_size: tuple[int, int] = (64, 48),
    step_period_ns: int = int(1e9 / RATE_HZ),
) -> Episode:
    """A valid episode (unless the arguments say otherwise) with values well inside aloha's range."""
    rng = np.random.default_rng(seed)
    width, height = video_size
    rgb = [np.full((height, width, 3), (40 * i + 10 * seed) % 255, np.uint8) for i in range(frames)]
    spec = CameraSpec(name="cam_high", codec="h264", container="mp4", width=64, height=48, fps=FPS)
    cam = CameraVideo(
        spec,
        np.arange(frames, dtype=np.int64) * int(1e9 / FPS),
        encode_mp4(rgb, fps=FPS, width=width, height=height),
    )
    meta = EpisodeMeta(f"{tag}-{uuid.uuid4().hex[:8]}", "r1", robot_type, "stack", 0, RATE_HZ, True)
    return Episode(
        meta,
        np.arange(steps, dtype=np.int64) * step_period_ns,
        rng.uniform(-1, 1, (steps, 4)).astype(np.float32),
        rng.uniform(-1, 1, (steps, 2)).astype(np.float32),
        (cam,),
    )


def with_arrays(
    ep: Episode,
    *,
    proprio: np.ndarray | None = None,
    action: np.ndarray | None = None,
    timestamps_ns: np.ndarray | None = None,
) -> Episode:
    """A copy of `ep` with some arrays replaced."""
    return Episode(
        ep.meta,
        ep.timestamps_ns if timestamps_ns is None else timestamps_ns,
        ep.proprio if proprio is None else proprio,
        ep.action if action is None else action,
        ep.cameras,
    )
