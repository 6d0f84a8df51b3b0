"""Featurize one assembled episode into the rows of the lake's episodes, steps and video tables.

Sits between the stream job's assembler and the lake sink. Pure logic, no I/O: video is
re-encoded at the training resolution in short independently decodable chunks (architecture
decision 4), each step gets the index of the frame every camera showed at that time, and the
episode row carries per-episode statistics of proprio and action.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from pi_format import (
    EPISODES_SCHEMA,
    STEPS_SCHEMA,
    VIDEO_SCHEMA,
    CameraVideo,
    Episode,
    ProtocolError,
    QuarantineReason,
    VideoError,
)
from pi_format.lake import EpisodeRows, with_chunk_crcs
from pi_format.stats import episode_stat_columns

# codec name written to video.codec: H.264 Annex-B, IDR first (pi_format.video.ChunkedVideoEncoder)
VIDEO_CODEC = "h264"


@dataclass(frozen=True, slots=True)
class FeaturizeConfig:
    """How training features are made from an episode.

    Example:
        >>> FeaturizeConfig(video_width=128, video_height=128, chunk_frames=8)
    """

    # 224x224 is the input size of the common vision backbones (ViT/ResNet), and decodes at
    # ~3000 frames/s per core in yuv420p (ARCHITECTURE.md), so the loader is not video-bound.
    video_width: int = 224
    video_height: int = 224
    # Frames per video row: one Delta row per 10 frames per camera keeps the table's row count
    # (and per-row overhead) small.
    chunk_frames: int = 10
    # An IDR every frame (intra-only): a shuffled sample decodes exactly its own frame, not half
    # a GOP. Measured here at 224x224 on the simulator's frames: 2.1-2.9x the video bytes of one
    # GOP per chunk (~2.2 KB/frame; the whole lake is still 2.8x smaller than Mosaic's JPEG
    # shards, 1.9x larger than LeRobot's AV1), and shuffled decoding ~3.6x faster
    # (benchmarks/loader, limit leg). Must divide chunk_frames; chunk_frames restores one closed
    # GOP per chunk.
    keyframe_interval: int = 1
    # CRF 20 is visually lossless for 224x224 robot footage at a fraction of CRF 0's size.
    crf: int = 20
    # Cameras re-encoded at once (threads: PyAV decodes and encodes without the GIL; each
    # camera's encoder stays single-threaded, so the bytes do not depend on it). None: one per
    # camera, at most the CPU count. Measured on 3 cameras of a 4 s episode: 450-510 ms one
    # after the other, 270-290 ms at once; this is latency an idle sink would otherwise add to
    # freshness.
    transcode_threads: int | None = None

    def __post_init__(self) -> None:
        for name, value in (("video_width", self.video_width), ("video_height", self.video_height)):
            if value <= 0 or value % 2:
                raise ValueError(f"{name} must be a positive even number (H.264 4:2:0), got {value}")
        if self.chunk_frames < 1:
            raise ValueError(f"chunk_frames must be >= 1, got {self.chunk_frames}")
        from pi_format.video import check_keyframe_interval

        check_keyframe_interval(self.keyframe_interval, self.chunk_frames)
        if not 0 <= self.crf <= 51:
            raise ValueError(f"crf must be in [0, 51] (x264's range), got {self.crf}")
        if self.transcode_threads is not None and self.transcode_threads < 1:
            raise ValueError(f"transcode_threads must be >= 1 or None, got {self.transcode_threads}")


def align_frames(step_timestamps_ns: np.ndarray, frame_timestamps_ns: np.ndarray) -> np.ndarray:
    """Index of the frame shown at each step: the latest frame with ts <= the step's ts.

    Steps before the first frame get frame 0 (the first image is the best one available).

    Raises:
        ValueError: no frames, or frame timestamps that decrease.

    Example:
        >>> align_frames(np.array([0, 10, 20, 25]), np.array([5, 20]))
        array([0, 0, 1, 1], dtype=int32)
    """
    frames = np.asarray(frame_timestamps_ns, dtype=np.int64)
    steps = np.asarray(step_timestamps_ns, dtype=np.int64)
    if frames.ndim != 1 or frames.shape[0] == 0:
        raise ValueError(f"frame_timestamps_ns must be a non-empty vector, got shape {frames.shape}")
    if frames.shape[0] > 1 and bool(np.any(np.diff(frames) < 0)):
        raise ValueError("frame_timestamps_ns must be non-decreasing")
    idx = np.searchsorted(frames, steps, side="right") - 1
    return np.maximum(idx, 0).astype(np.int32)


def _list_column(values: np.ndarray, value_type: pa.DataType) -> pa.ListArray:
    """A [rows, width] array as a list<value_type> column without per-row Python objects."""
    rows, width = values.shape
    offsets = pa.array(np.arange(rows + 1, dtype=np.int32) * width, type=pa.int32())
    flat = pa.array(np.ascontiguousarray(values).reshape(-1), type=value_type)
    return pa.ListArray.from_arrays(offsets, flat)


def _stats(name: str, values: np.ndarray) -> dict[str, object]:
    # mean/std/min/max (float32 lists; float64 accumulation: a float32 mean over thousands of
    # steps loses digits) and the statistics that merge over any selection: float64 mean and
    # M2, and the quantile sketch (pi_format.stats; pi_loader's Dataset.norm_stats merges them).
    return episode_stat_columns(name, values)


# The verification decoder's options. err_detect=explode: FFmpeg's h264 decoder otherwise
# conceals a damaged slice and still returns a frame (a chunk cut by one byte, or with one byte
# flipped, passed the old full decode), so a bitstream error must fail the decode.
# skip_loop_filter=all: deblocking is arithmetic on what was parsed and cannot fail; skipping it
# halves the check's CPU (issue 35: 26 -> 13 ms per camera of a 4 s episode, with one context
# per camera). Every bit of every slice is still parsed and every macroblock reconstructed.
VERIFY_DECODER_OPTIONS = {"err_detect": "explode", "skip_loop_filter": "all"}


def _verify_chunks(episode_id: str, camera: str, chunks: list[Any], config: FeaturizeConfig) -> None:
    """Every training chunk parses, key frame first, to its frame count at the training size.

    One decoder per camera runs over the chunks in order: each chunk opens with an IDR and
    repeats its SPS/PPS (the encoder's settings), which is checked here from the access units,
    so the shared context decodes each chunk as a decoder starting on it would.
    """
    import av
    from pi_format.video.reader import access_unit_bounds

    def refuse(c: Any, what: str) -> ProtocolError:
        return ProtocolError(
            QuarantineReason.BAD_VIDEO,
            f"episode {episode_id} camera {camera!r}: training chunk {c.chunk_index} {what}",
        )

    want = (config.video_width, config.video_height, "yuv420p")
    intra_only = config.keyframe_interval == 1
    ctx = av.CodecContext.create("h264", "r")
    ctx.thread_count = 1  # frames come out as their packet goes in: counted per chunk
    ctx.options = dict(VERIFY_DECODER_OPTIONS)
    for c in chunks:
        units = access_unit_bounds(c.data)
        if units is None or not units[0][2]:
            raise refuse(c, "does not decode: it is not H.264 Annex-B opening with an IDR frame")
        if intra_only and not all(key for _, _, key in units):
            raise refuse(c, "holds a frame that is not an IDR, the config asks for intra-only video")
        # the decoded frames' size and format, not copies of their planes (issue 35)
        shapes: set[tuple[int, int, str]] = set()
        decoded = 0
        try:
            for start, end, _ in units:
                for f in ctx.decode(av.Packet(c.data[start:end])):
                    decoded += 1
                    shapes.add((f.width, f.height, f.format.name))
        except av.FFmpegError as err:
            raise refuse(c, f"does not decode: {err}") from err
        got = sorted(shapes)
        if decoded != c.frame_count or got != [want]:
            raise refuse(
                c,
                f"decodes to {decoded} frames of (width, height, format) {got}, "
                f"expected {c.frame_count} of {want}",
            )


def _transcode(
    episode_id: str, attempt_id: str, cam: CameraVideo, config: FeaturizeConfig
) -> list[dict[str, object]]:
    """Re-encode one camera into chunk rows; BAD_VIDEO when it cannot be decoded as declared."""
    import av
    from pi_format.video import ChunkedVideoEncoder, VideoChunk, decode_container

    name = cam.spec.name
    declared = cam.frame_count
    chunks: list[VideoChunk] = []
    decoded = 0
    try:
        enc = ChunkedVideoEncoder(
            width=config.video_width,
            height=config.video_height,
            fps=cam.spec.fps,
            chunk_frames=config.chunk_frames,
            crf=config.crf,
            keyframe_interval=config.keyframe_interval,
        )
        # Frames stay yuv420p av.VideoFrames: the encoder only rescales, no RGB round trip.
        for frame in decode_container(cam.data):
            decoded += 1
            if decoded > declared:
                break
            if (frame.width, frame.height) != (cam.spec.width, cam.spec.height):
                raise ProtocolError(
                    QuarantineReason.BAD_VIDEO,
                    f"episode {episode_id} camera {name!r}: frame {decoded - 1} is "
                    f"{frame.width}x{frame.height}, the meta declares {cam.spec.width}x{cam.spec.height}",
                )
            chunks.extend(enc.add(frame))
        chunks.extend(enc.close())
        # Decode every training chunk just made: a chunk the loader cannot decode must fail
        # here (quarantine), not in a training run. Decoding costs a fraction of the encoding
        # it follows (yuv420p, ~0.2 ms per 224x224 frame).
        _verify_chunks(episode_id, name, chunks, config)
    except (VideoError, av.FFmpegError) as err:
        raise ProtocolError(
            QuarantineReason.BAD_VIDEO, f"episode {episode_id} camera {name!r}: {err}"
        ) from err
    if decoded != declared:
        got = f"more than {declared}" if decoded > declared else str(decoded)
        raise ProtocolError(
            QuarantineReason.BAD_VIDEO,
            f"episode {episode_id} camera {name!r}: video holds {got} frames, "
            f"{declared} frame timestamps were declared",
        )
    ts = cam.frame_timestamps_ns
    return [
        {
            "episode_id": episode_id,
            "attempt_id": attempt_id,
            "camera": name,
            "chunk_index": c.chunk_index,
            "first_frame": c.first_frame,
            "frame_count": c.frame_count,
            "frame_timestamps_ns": ts[c.first_frame : c.first_frame + c.frame_count].tolist(),
            "codec": VIDEO_CODEC,
            "width": config.video_width,
            "height": config.video_height,
            "data": c.data,
        }
        for c in chunks
    ]


def _transcode_cameras(
    episode_id: str, attempt_id: str, cameras: Sequence[CameraVideo], config: FeaturizeConfig
) -> list[dict[str, object]]:
    """Every camera's chunk rows, in camera order; the first failing camera's error (in camera
    order, as one after the other would raise it)."""
    threads = min(len(cameras), config.transcode_threads or os.cpu_count() or 1)
    if threads <= 1:
        per_camera = [_transcode(episode_id, attempt_id, cam, config) for cam in cameras]
    else:
        with ThreadPoolExecutor(threads, thread_name_prefix="transcode") as pool:
            per_camera = list(pool.map(lambda cam: _transcode(episode_id, attempt_id, cam, config), cameras))
    return [row for rows in per_camera for row in rows]


def featurize(
    episode: Episode,
    *,
    attempt_id: str,
    received_at_ns: int,
    raw_size_bytes: int,
    committed_at_ns: int,
    config: FeaturizeConfig,
) -> EpisodeRows:
    """Make the episodes/steps/video rows of one episode attempt.

    Args:
        episode: an assembled episode (pi_format.wire.EpisodeAssembler.assemble()).
        attempt_id: id shared by every row of this attempt (the visibility key).
        received_at_ns: when the manifest chunk arrived.
        raw_size_bytes: bytes of all the episode's messages.
        committed_at_ns: the commit time written into the episodes row.
        config: video size, chunking and quality.

    Raises:
        ProtocolError: BAD_VALUES for non-finite proprio/action or unordered frame timestamps,
            BAD_VIDEO for video that does not decode to its declared frame count.

    Example:
        >>> f = featurize(ep, attempt_id="a1", received_at_ns=t, raw_size_bytes=n,
        ...               committed_at_ns=t, config=FeaturizeConfig())
        >>> f.steps.num_rows == ep.step_count
        True
    """
    eid = episode.episode_id
    for field in ("proprio", "action"):
        arr: np.ndarray = getattr(episode, field)
        if not bool(np.isfinite(arr).all()):
            bad = int(np.argwhere(~np.isfinite(arr))[0][0])
            raise ProtocolError(
                QuarantineReason.BAD_VALUES, f"episode {eid}: {field} is not finite at step {bad}"
            )
    steps_ts = episode.timestamps_ns
    frame_index_cols = []
    for cam in episode.cameras:
        try:
            frame_index_cols.append(align_frames(steps_ts, cam.frame_timestamps_ns))
        except ValueError as err:
            raise ProtocolError(
                QuarantineReason.BAD_VALUES, f"episode {eid} camera {cam.spec.name!r}: {err}"
            ) from err
    video_rows = _transcode_cameras(eid, attempt_id, episode.cameras, config)

    t = episode.step_count
    frame_index = np.stack(frame_index_cols, axis=1) if frame_index_cols else np.zeros((t, 0), dtype=np.int32)
    steps = pa.Table.from_arrays(
        [
            pa.array([eid] * t, type=pa.string()),
            pa.array([attempt_id] * t, type=pa.string()),
            pa.array(np.arange(t, dtype=np.int32)),
            pa.array(steps_ts, type=pa.int64()),
            # float32 straight from the episode's buffers: bit-exact, no float64 detour
            _list_column(episode.proprio, pa.float32()),
            _list_column(episode.action, pa.float32()),
            _list_column(frame_index, pa.int32()),
        ],
        schema=STEPS_SCHEMA,
    )
    # each chunk's checksum as it leaves the encoder (architecture decision 10)
    video = with_chunk_crcs(pa.Table.from_pylist(video_rows, schema=VIDEO_SCHEMA))
    m = episode.meta
    row: dict[str, object] = {
        "episode_id": eid,
        "attempt_id": attempt_id,
        "robot_id": m.robot_id,
        "robot_type": m.robot_type,
        "task": m.task,
        "start_time_ns": m.start_time_ns,
        "control_rate_hz": m.control_rate_hz,
        "success": m.success,
        "tags": list(m.tags),
        "step_count": t,
        # the time the steps cover at the control rate (timestamps may jitter; the rate is nominal)
        "duration_s": t / m.control_rate_hz,
        "proprio_dim": episode.proprio_dim,
        "action_dim": episode.action_dim,
        "cameras": list(episode.camera_names),
        "camera_fps": [c.spec.fps for c in episode.cameras],
        "video_width": config.video_width,
        "video_height": config.video_height,
        "video_chunk_frames": config.chunk_frames,
        **_stats("proprio", episode.proprio),
        **_stats("action", episode.action),
        "raw_size_bytes": raw_size_bytes,
        "received_at_ns": received_at_ns,
        "committed_at_ns": committed_at_ns,
    }
    return EpisodeRows(episode=pa.Table.from_pylist([row], schema=EPISODES_SCHEMA), steps=steps, video=video)
