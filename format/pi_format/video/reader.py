"""Video decoders: a robot's uploaded container, and the lake's chunked training video."""

from __future__ import annotations

import io
import sys
import threading
from collections.abc import Iterator

import av
import numpy as np

from pi_format.errors import VideoError


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
    return [frame.to_ndarray() for frame in ChunkDecoder(data).all_frames()]


def decode_chunk_rgb(data: bytes, *, height: int, width: int) -> list[np.ndarray]:
    """Decode one lake video chunk to uint8 RGB frames (h, w, 3), converted by swscale exactly
    as `ChunkDecoder.rgb` does (so the loader and this function agree pixel for pixel)."""
    frames = [frame.to_ndarray(format="rgb24") for frame in ChunkDecoder(data).all_frames()]
    for index, frame in enumerate(frames):
        if frame.shape != (height, width, 3):
            raise VideoError(
                f"chunk frame {index} is {frame.shape[1]}x{frame.shape[0]}, expected {width}x{height}"
            )
    return frames


class ChunkDecoder:
    """Frames of one lake video chunk, decoded lazily and only as far as asked.

    A shuffled sample needs one frame of a chunk: decoding stops at that frame, and a later
    request for a frame further on continues from there instead of starting again. RGB comes
    from FFmpeg's swscale (`to_ndarray(format="rgb24")`); with PyAV 18 that measured several
    times cheaper than converting yuv420p planes with numpy (see benchmarks/loader).

    Example:
        >>> decoder = ChunkDecoder(chunk.data)
        >>> rgb = decoder.rgb(3)   # decodes frames 0..3 only
    """

    def __init__(self, data: bytes) -> None:
        self._size_bytes = len(data)
        try:
            self._ctx = av.CodecContext.create("h264", "r")
            # One thread: frame threads add latency (frames come out late), which would make
            # "decode only up to frame i" decode further than i.
            self._ctx.thread_count = 1
            self._packets: list[av.Packet | None] = [*self._ctx.parse(data), *self._ctx.parse(None), None]
        except av.FFmpegError as err:
            raise VideoError(f"cannot parse H.264 chunk ({len(data)} bytes): {err}") from err
        self._next_packet = 0
        self._frames: list[av.VideoFrame] = []
        # A codec context (and a frame's swscale context) must not be used by two threads at
        # once (segfault seen under grain's thread pool); one lock per chunk keeps chunks parallel.
        self._lock = threading.RLock()

    @property
    def frames_decoded(self) -> int:
        return len(self._frames)

    def frame(self, index: int) -> av.VideoFrame:
        """The decoded frame `index` of the chunk.

        Raises:
            VideoError: the chunk does not decode, or holds fewer than index+1 frames.
        """
        with self._lock:
            return self._frame_locked(index)

    def all_frames(self) -> list[av.VideoFrame]:
        """Every frame of the chunk, decoding what is left.

        Raises:
            VideoError: the chunk does not decode.
        """
        with self._lock:
            self._decode_until(sys.maxsize)
            return list(self._frames)

    def _frame_locked(self, index: int) -> av.VideoFrame:
        if index < 0:
            raise VideoError(f"frame index must be >= 0, got {index}")
        self._decode_until(index + 1)
        if index >= len(self._frames):
            raise VideoError(
                f"H.264 chunk ({self._size_bytes} bytes) decoded to {len(self._frames)} frames; "
                f"frame {index} was asked for"
            )
        return self._frames[index]

    def _decode_until(self, frame_count: int) -> None:
        """Feed packets until `frame_count` frames are out or the chunk (flush included) ends."""
        try:
            while len(self._frames) < frame_count and self._next_packet < len(self._packets):
                packet = self._packets[self._next_packet]
                self._next_packet += 1
                self._frames.extend(self._ctx.decode(packet))
        except av.FFmpegError as err:
            raise VideoError(f"cannot decode H.264 chunk ({self._size_bytes} bytes): {err}") from err

    def rgb(self, index: int) -> np.ndarray:
        """Frame `index` as uint8 RGB (h, w, 3), BT.601 limited range like `yuv420p_to_rgb`."""
        with self._lock:
            return np.asarray(self._frame_locked(index).to_ndarray(format="rgb24"))

    def yuv(self, index: int) -> np.ndarray:
        """Frame `index` as yuv420p planes, shape (h*3/2, w)."""
        with self._lock:
            return np.asarray(self._frame_locked(index).to_ndarray())
