"""Video decoders: a robot's uploaded container, and the lake's chunked training video."""

from __future__ import annotations

import io
from collections.abc import Iterator

import av
import numpy as np

from pi_format.errors import VideoError
from pi_format.video._color import yuv420p_to_rgb


def decode_container(data: bytes) -> Iterator[av.VideoFrame]:
    """Yield every frame of the first video stream of a container file (MP4, MKV...).

    Raises:
        VideoError: when the bytes are not a decodable video.
    """
    try:
        with av.open(io.BytesIO(data), mode="r") as container:
            if not container.streams.video:
                raise VideoError("container has no video stream")
            yield from container.decode(video=0)
    except av.FFmpegError as err:
        raise VideoError(f"cannot decode video container ({len(data)} bytes): {err}") from err


def decode_chunk_yuv(data: bytes) -> list[np.ndarray]:
    """Decode one lake video chunk (H.264 Annex-B) to yuv420p arrays of shape (h*3/2, w).

    Example:
        >>> planes = decode_chunk_yuv(chunk.data)
    """
    try:
        ctx = av.CodecContext.create("h264", "r")
        frames: list[np.ndarray] = []
        # parse(None) flushes the parser: without it the last frame's packet stays buffered.
        for packet in [*ctx.parse(data), *ctx.parse(None)]:
            frames.extend(f.to_ndarray() for f in ctx.decode(packet))
        frames.extend(f.to_ndarray() for f in ctx.decode(None))
    except av.FFmpegError as err:
        raise VideoError(f"cannot decode H.264 chunk ({len(data)} bytes): {err}") from err
    return frames


def decode_chunk_rgb(data: bytes, *, height: int, width: int) -> list[np.ndarray]:
    """Decode one lake video chunk to uint8 RGB frames (h, w, 3) via the vectorized path."""
    return [yuv420p_to_rgb(p, height, width) for p in decode_chunk_yuv(data)]
