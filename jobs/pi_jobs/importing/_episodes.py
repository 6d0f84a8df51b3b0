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


# How a camera whose aspect ratio differs from the lake's video (FeaturizeConfig's width x
# height, 224 x 224 by default) is fitted before the stream job scales it to that size.
RESIZE_POLICIES = ("letterbox", "center-crop", "stretch")


class DatasetImportError(PiJobsError):
    """A dataset to import cannot be read as asked (missing keys, bad shapes, odd layouts)."""


@dataclass(frozen=True, slots=True)
class ImportOptions:
    """What every importer does the same way.

    Args:
        resize: how a camera of another aspect ratio than the lake's video is fitted:
            "letterbox" (pad with black bars to that ratio: every pixel kept, geometry kept),
            "center-crop" (cut the longer side: geometry kept, the edges lost), "stretch" (pass
            it on: the stream job scales it, distorting shapes). Recorded per episode as the tag
            `resize:<policy>`, with each camera's size as read (`camera-size:<cam>=WxH`).
        target_width, target_height: the lake's video size (the stream job's FeaturizeConfig).
        max_array_bytes: the most bytes one array (an HDF5 dataset, a LeRobot data file
            uncompressed, an episode's decoded video of one camera) may take; checked against
            what the file declares before anything is read or allocated.
        drop_features: LeRobot features the lake has no column for, dropped as asked.

    Example:
        >>> ImportOptions(resize="center-crop", drop_features=("observation.effort",))
    """

    # letterbox by default: it is the only policy that loses nothing and distorts nothing; a
    # user who prefers the edges cut or the shapes stretched says so (--resize)
    resize: str = "letterbox"
    # the stream job's default video size (FeaturizeConfig): the CLI passes the configured one
    target_width: int = 224
    target_height: int = 224
    # 4 GiB: a long episode of a high-resolution camera fits (1,000 frames of 1280 x 720 RGB are
    # 2.8 GB); a declared shape of terabytes is refused before it is allocated
    max_array_bytes: int = 4 << 30
    drop_features: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.resize not in RESIZE_POLICIES:
            raise ValueError(f"resize must be one of {list(RESIZE_POLICIES)}, got {self.resize!r}")
        if self.target_width < 2 or self.target_height < 2:
            raise ValueError(
                f"target size must be at least 2 x 2, got {self.target_width} x {self.target_height}"
            )
        if self.max_array_bytes < 1:
            raise ValueError(f"max_array_bytes must be >= 1, got {self.max_array_bytes}")
        if not isinstance(self.drop_features, tuple):
            raise TypeError(f"drop_features must be a tuple of str, got {type(self.drop_features).__name__}")

    def check_bytes(self, what: str, nbytes: int, shape: object) -> None:
        """DatasetImportError unless an array of `nbytes` (as declared) is within the limit."""
        if nbytes > self.max_array_bytes:
            raise DatasetImportError(
                f"{what} declares shape {shape} ({nbytes / 2**30:.2f} GiB), over the import's limit of "
                f"{self.max_array_bytes / 2**30:.2f} GiB per array (ImportOptions.max_array_bytes, "
                "`--max-array-mb`): a damaged header, or raise the limit if it is real"
            )


def fit_frames(video: np.ndarray, options: ImportOptions) -> np.ndarray:
    """uint8 [T, H, W, 3] frames fitted to the lake's aspect ratio by `options.resize`.

    Example:
        >>> fit_frames(np.zeros((2, 480, 640, 3), np.uint8), ImportOptions()).shape
        (2, 640, 640, 3)
    """
    _, height, width, _ = video.shape
    target = options.target_width / options.target_height
    if options.resize == "stretch" or abs(width / height - target) < 1.0 / min(width, height):
        return video
    if options.resize == "letterbox":
        if width / height > target:  # wider: bars above and below
            new_height = round(width / target)
            top = (new_height - height) // 2
            return np.pad(video, ((0, 0), (top, new_height - height - top), (0, 0), (0, 0)))
        new_width = round(height * target)
        left = (new_width - width) // 2
        return np.pad(video, ((0, 0), (0, 0), (left, new_width - width - left), (0, 0)))
    if width / height > target:  # center-crop: cut the sides
        new_width = max(2, round(height * target))
        left = (width - new_width) // 2
        return video[:, :, left : left + new_width]
    new_height = max(2, round(width / target))
    top = (height - new_height) // 2
    return video[:, top : top + new_height]


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
    options: ImportOptions | None = None,
) -> Episode:
    """An Episode of `proprio` [T, D] and `action` [T, A] at `fps`, with one camera per entry of
    `frames` (uint8 [T, H, W, 3], encoded here as H.264 MP4) or of `camera_videos` (name ->
    (an MP4/any container as the dataset stores it, width, height, frame count): passed on as it
    is, the stream job decodes it). Frames are fitted to the lake's aspect ratio by
    `options.resize` (`fit_frames`), recorded in the episode's tags.

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
    options = options or ImportOptions()
    cameras = []
    sizes: list[str] = []
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
        sizes.append(f"camera-size:{safe_name(name)}={video.shape[2]}x{video.shape[1]}")
        video = fit_frames(video, options)
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
        tags=(*tags, *((f"resize:{options.resize}", *sizes) if sizes else ())),
    )
    return Episode(meta, timestamps, proprio, action, tuple(cameras))
