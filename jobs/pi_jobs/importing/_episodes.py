"""What every importer hands the import driver: a fleet `Episode` (the same model the robots
upload, pi_format.episode) built from arrays read elsewhere, with a deterministic id and the
annotations that come with it (LeRobot's task strings become instructions).

Frames are encoded once here as the robots' cameras encode them (`pi_format.video.encode_mp4`,
H.264 in MP4); the stream job then decodes, validates and re-encodes them for training like any
fleet upload.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from pi_format import CameraSpec, CameraVideo, Episode, EpisodeMeta

from pi_jobs.errors import PiJobsError

# Every imported episode starts here: timestamps are a pure function of the step index and the
# rate, so the same file encodes to the same bytes on every run (the spool refuses an id again
# with other bytes); the dataset's own wall-clock times are not kept by these formats anyway.
IMPORT_START_NS = 1_700_000_000_000_000_000
_UNSAFE = re.compile(r"[^A-Za-z0-9_.\-]+")


class DatasetImportError(PiJobsError):
    """A dataset to import cannot be read as asked (missing keys, bad shapes, odd layouts)."""


@dataclass(frozen=True, slots=True)
class SpanText:
    """An annotation that comes with an imported episode: `kind` over steps [start, end)."""

    kind: str
    value: str
    start: int
    end: int


@dataclass(frozen=True, slots=True, eq=False)
class ImportedEpisode:
    """One episode read from an outside dataset, ready for the fleet's ingest path.

    Example:
        >>> item = ImportedEpisode(episode, source="robomimic:lift.hdf5#demo_0")
    """

    episode: Episode
    source: str  # where it came from, for messages and provenance
    annotations: tuple[SpanText, ...] = field(default=())


def safe_name(text: str, limit: int = 40) -> str:
    """`text` as a fragment of an id: letters, digits, `_.-`, at most `limit` characters."""
    cleaned = _UNSAFE.sub("-", text).strip("-._")
    return (cleaned or "x")[:limit]


def file_digest(path: Path, length: int = 10) -> str:
    """The first `length` hex digits of the sha256 of a file's bytes: ids survive a rename."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()[:length]


def episode_id(prefix: str, digest: str, item: str) -> str:
    """A deterministic episode id: `<prefix>-<digest>-<item>`, a valid pi_format name."""
    return f"{safe_name(prefix, 48)}-{digest}-{safe_name(item, 64)}"[:128]


def make_episode(
    *,
    episode_id: str,
    robot_id: str,
    robot_type: str,
    task: str,
    fps: float,
    proprio: np.ndarray,
    action: np.ndarray,
    frames: Mapping[str, np.ndarray],
    success: bool = True,
    tags: Sequence[str] = (),
    source: str,
    camera_videos: Mapping[str, tuple[bytes, int, int, int]] | None = None,
) -> Episode:
    """An Episode of `proprio` [T, D] and `action` [T, A] at `fps`, with one camera per entry of
    `frames` (uint8 [T, H, W, 3], encoded here as H.264 MP4) or of `camera_videos` (name ->
    (an MP4/any container as the dataset stores it, width, height, frame count): passed on as it
    is, the stream job decodes it).

    Raises:
        DatasetImportError: shapes that do not agree, naming `source` and what to fix.
    """
    from pi_format.video import encode_mp4

    proprio = np.ascontiguousarray(proprio, dtype=np.float32)
    action = np.ascontiguousarray(action, dtype=np.float32)
    if proprio.ndim == 1:
        proprio = proprio[:, None]
    if action.ndim == 1:
        action = action[:, None]
    steps = proprio.shape[0]
    if proprio.ndim != 2 or action.ndim != 2 or action.shape[0] != steps or steps == 0:
        raise DatasetImportError(
            f"{source}: proprio {proprio.shape} and action {action.shape} must be [T, D] and [T, A] "
            "with the same T > 0"
        )
    timestamps = IMPORT_START_NS + np.round(np.arange(steps) * (1e9 / fps)).astype(np.int64)
    cameras = []
    for name, video in sorted(frames.items()):
        if video.dtype != np.uint8 or video.ndim != 4 or video.shape[-1] != 3:
            raise DatasetImportError(
                f"{source}: camera {name!r} must be uint8 [T, H, W, 3], got {video.dtype}{video.shape}"
            )
        if video.shape[0] != steps:
            raise DatasetImportError(
                f"{source}: camera {name!r} has {video.shape[0]} frames for {steps} steps; "
                "one frame per step is what these layouts store"
            )
        # H.264 in yuv420p needs even sizes: an odd last row or column is dropped
        height, width = video.shape[1] - video.shape[1] % 2, video.shape[2] - video.shape[2] % 2
        video = np.ascontiguousarray(video[:, :height, :width])
        data = encode_mp4(list(video), fps=fps, width=width, height=height, crf=18, keyframe_interval=30)
        spec = CameraSpec(
            name=safe_name(name), codec="h264", container="mp4", width=width, height=height, fps=fps
        )
        cameras.append(CameraVideo(spec, timestamps.copy(), data))
    for name, (data, width, height, count) in sorted((camera_videos or {}).items()):
        if count != steps:
            raise DatasetImportError(f"{source}: camera {name!r} has {count} frames for {steps} steps")
        spec = CameraSpec(
            name=safe_name(name), codec="h264", container="mp4", width=width, height=height, fps=fps
        )
        cameras.append(CameraVideo(spec, timestamps.copy(), data))
    meta = EpisodeMeta(
        episode_id=episode_id,
        robot_id=safe_name(robot_id, 128),
        robot_type=robot_type,
        task=task,
        start_time_ns=IMPORT_START_NS,
        control_rate_hz=float(fps),
        success=bool(success),
        tags=tuple(tags),
    )
    return Episode(meta, timestamps, proprio, action, tuple(cameras))
