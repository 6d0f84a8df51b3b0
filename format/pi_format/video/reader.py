"""Video decoders: a robot's uploaded container, and the lake's chunked training video."""

from __future__ import annotations

import bisect
import io
import os
import threading
from collections.abc import Iterator, Sequence

import av
import numpy as np
from av.video.codeccontext import VideoCodecContext
from av.video.reformatter import VideoReformatter

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
    frames = [frame_to_rgb(frame) for frame in ChunkDecoder(data).all_frames()]
    for index, frame in enumerate(frames):
        if frame.shape != (height, width, 3):
            raise VideoError(
                f"chunk frame {index} is {frame.shape[1]}x{frame.shape[0]}, expected {width}x{height}"
            )
    return frames


class _ThreadCodec(threading.local):
    """This thread's H.264 decoder, parser and RGB converter, reused across chunks.

    A codec context per intra frame (+0.06 ms per frame) and `frame.to_ndarray(format="rgb24")`
    (a new swscale context and conversion threads per call: 0.084 ms, against 0.025 ms with one
    single-threaded converter) cost a good part of decoding a 224x224 intra frame (~0.2 ms),
    so each thread keeps one of each.
    """

    def __init__(self) -> None:
        self.decoder: VideoCodecContext | None = None
        self.parser: av.CodecContext | None = None
        self.reformatter: VideoReformatter | None = None

    def shared_decoder(self) -> VideoCodecContext:
        return self.decoder if self.decoder is not None else self.reset_decoder()

    def reset_decoder(self) -> VideoCodecContext:
        self.decoder = _new_decoder()
        return self.decoder

    def to_rgb(self, frame: av.VideoFrame, out: np.ndarray | None = None) -> np.ndarray:
        if self.reformatter is None:
            self.reformatter = VideoReformatter()
        # threads=1: PyAV's default (0, automatic) starts swscale threads, which cost more than
        # converting a 224x224 frame and which a forked child (torch's DataLoader workers)
        # inherits as dead threads and waits on forever.
        rgb = self.reformatter.reformat(frame, format="rgb24", threads=1)
        if out is None:
            return np.asarray(rgb.to_ndarray())
        # Straight from swscale's plane into the caller's array (a batch's slot): one copy of the
        # pixels instead of two (to_ndarray's, then the batch's).
        plane = rgb.planes[0]
        height, width, stride = rgb.height, rgb.width, plane.line_size
        if out.shape != (height, width, 3) or out.dtype != np.uint8:
            raise ValueError(
                f"out must be uint8 ({height}, {width}, 3) for this frame, got {out.dtype} {out.shape}"
            )
        if stride == width * 3 and out.flags.c_contiguous:
            # rows without padding into a contiguous row of the batch: one memcpy, no numpy views
            # (~1.5 us a frame of Python: benchmarks/loader/PROFILE.md)
            out.data.cast("B")[:] = memoryview(plane)[: height * stride]
            return out
        rows = np.frombuffer(memoryview(plane), np.uint8, count=height * stride).reshape(height, stride)
        np.copyto(out, rows[:, : width * 3].reshape(height, width, 3))
        return out

    def parse(self, data: bytes) -> list[av.Packet]:
        if self.parser is None:
            self.parser = av.CodecContext.create("h264", "r")
        try:
            return [*self.parser.parse(data), *self.parser.parse(None)]
        except BaseException:
            self.parser = None  # its state is unknown after an error
            raise


def _new_decoder() -> VideoCodecContext:
    ctx = av.CodecContext.create("h264", "r")
    if not isinstance(ctx, VideoCodecContext):
        raise VideoError(f"FFmpeg's h264 decoder is not a video codec here ({type(ctx).__name__})")
    # One thread: frame threads add latency (frames come out late), which would make
    # "decode only up to frame i" decode further than i.
    ctx.thread_count = 1
    return ctx


_THREAD = _ThreadCodec()


def _forget_codecs_after_fork() -> None:
    # FFmpeg contexts made before a fork may hold thread state that is dead in the child.
    _THREAD.decoder = _THREAD.parser = None
    _THREAD.reformatter = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_codecs_after_fork)

_START_CODE = b"\x00\x00\x01"
_SLICE, _IDR = 1, 5
# NAL types that open a new access unit when they follow a picture's slices (H.264 7.4.1.2.3):
# SEI, SPS, PPS, access unit delimiter, and 14..18.
_AU_OPENERS = frozenset({6, 7, 8, 9, 14, 15, 16, 17, 18})


def split_access_units(data: bytes) -> list[tuple[bytes, bool]] | None:
    """Split an H.264 Annex-B stream into access units (one per frame), with "is an IDR".

    A scan for start codes and NAL types (H.264 7.4.1.2.3; a picture's first slice has
    first_mb_in_slice 0), several times cheaper in Python than FFmpeg's parser for a 10-frame
    chunk. Returns None when the bytes do not look like Annex-B, so the caller can fall back to
    the parser. Slices are assumed in order (no arbitrary slice order, which x264 never writes).

    Example:
        >>> [key for _, key in split_access_units(chunk.data)]
        [True, True, True, True, True, True, True, True, True, True]
    """
    bounds = access_unit_bounds(data)
    return None if bounds is None else [(data[start:end], key) for start, end, key in bounds]


def access_unit_bounds(data: bytes) -> list[tuple[int, int, bool]] | None:
    """(start, end, is an IDR) of each access unit of `data` (see `split_access_units`), without
    copying them out."""
    pos = data.find(_START_CODE)
    if pos < 0 or any(data[:pos]):  # only zero bytes may come before the first start code
        return None
    units: list[tuple[int, int, bool]] = []
    unit_start, seen_slice, key = 0, False, False
    end = len(data)
    while pos >= 0:
        header = pos + 3
        if header >= end:
            return None
        nal_type = data[header] & 0x1F
        # a 4-byte start code's leading zero belongs to this NAL, not to the previous one
        nal_start = pos - 1 if pos > unit_start and data[pos - 1] == 0 else pos
        if nal_type in (_SLICE, _IDR):
            # ue(v) first_mb_in_slice is 0 exactly when the first payload bit is 1
            first_slice = header + 1 < end and data[header + 1] & 0x80
            if seen_slice and first_slice:
                units.append((unit_start, nal_start, key))
                unit_start, key = nal_start, False
            seen_slice = True
            key = key or nal_type == _IDR
        elif nal_type in _AU_OPENERS and seen_slice:
            units.append((unit_start, nal_start, key))
            unit_start, seen_slice, key = nal_start, False, False
        pos = data.find(_START_CODE, header)
    if not seen_slice:
        return None
    units.append((unit_start, end, key))
    return units


def frame_to_rgb(frame: av.VideoFrame, out: np.ndarray | None = None) -> np.ndarray:
    """A decoded frame as uint8 RGB (h, w, 3) through swscale, with this thread's cached
    converter: the same pixels as `frame.to_ndarray(format="rgb24")`, without a new swscale
    context for every frame.

    Example:
        >>> rgb = frame_to_rgb(ChunkDecoder(chunk.data).frame(0))
    """
    return _THREAD.to_rgb(frame, out)


class ChunkDecoder:
    """Frames of one lake video chunk, decoded lazily and only as far as asked.

    A chunk is H.264 Annex-B whose first frame is a keyframe. Intra-only chunks (every frame a
    keyframe, pi-lake's default training video) decode any frame alone, on the thread's shared
    codec context. Chunks with a GOP decode frame i from the last keyframe at or before it, or
    continue an earlier decode of the chunk that stands between that keyframe and i, on a
    context of their own, and never past i. Frames decoded once are kept; RGB conversion uses
    the thread's swscale context.

    Example:
        >>> decoder = ChunkDecoder(chunk.data)
        >>> rgb = decoder.rgb(3)   # intra-only: decodes frame 3 alone; one GOP: frames 0..3
    """

    def __init__(self, data: bytes, units: Sequence[tuple[int, int, int]] | None = None) -> None:
        self._size_bytes = len(data)
        # `units`: this chunk's `access_unit_bounds` (start, end, is an IDR), known from an
        # earlier decoder of the same bytes (`access_units`): a reader that keeps them skips the
        # scan.
        bounds = access_unit_bounds(data) if units is None else units
        self._units = bounds
        # Access units stay (start, end) of `data` until decoded: an intra-only chunk makes the
        # one packet it decodes, not one per frame.
        self._data = data
        self._packets: Sequence[av.Packet | tuple[int, int, int]]
        if bounds is not None:
            self._packets = bounds
            keys: list[int] = [key for _, _, key in bounds]
        else:  # not plain Annex-B as pi-lake writes it: FFmpeg's parser decides
            try:
                parsed = _THREAD.parse(data)
            except av.FFmpegError as err:
                raise VideoError(f"cannot parse H.264 chunk ({len(data)} bytes): {err}") from err
            self._packets = list(parsed)
            keys = [p.is_keyframe for p in parsed]
        # Frame 0 is always a start: a chunk decodes on its own by contract.
        self._keyframes = [0, *(i for i, key in enumerate(keys) if i and key)]
        self._intra = len(self._keyframes) == len(self._packets)
        self._ctx: VideoCodecContext | None = None  # GOP chunks: a context of their own ...
        self._cursor: tuple[int, int] | None = None  # ... standing at (next packet, next frame)
        self._frames: dict[int, av.VideoFrame] = {}
        self._frames_decoded = 0
        self._frame_count: int | None = None  # known once the chunk was decoded to its end
        # A ChunkDecoder may be shared by threads (grain's thread pool): a lock per chunk keeps
        # chunks parallel; a codec context is never used by two threads at once.
        self._lock = threading.RLock()

    @property
    def access_units(self) -> Sequence[tuple[int, int, int]] | None:
        """(start, end, is an IDR) of each access unit of the chunk (`access_unit_bounds`), to
        pass as `units` to a later decoder of the same bytes; None when FFmpeg's parser split it."""
        return self._units

    @property
    def data(self) -> bytes:
        """The chunk's compressed bytes (what a GPU decoder is handed instead of frames)."""
        return self._data

    @property
    def frames_decoded(self) -> int:
        """Frames this decoder has decoded."""
        return self._frames_decoded

    @property
    def intra_only(self) -> bool:
        """Every frame of the chunk is a keyframe (decodes alone)."""
        return self._intra

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
            index = 0
            while self._frame_count is None or index < self._frame_count:
                if index not in self._frames:
                    self._decode_to(index)
                    if index not in self._frames:
                        break
                index += 1
            return [self._frames[i] for i in range(index)]

    def _frame_locked(self, index: int) -> av.VideoFrame:
        if index < 0:
            raise VideoError(f"frame index must be >= 0, got {index}")
        frame = self._frames.get(index)
        if frame is None:
            self._decode_to(index)
            # An intra-only chunk's frame decodes alone again at the same cost, so it is not
            # kept: a decoder held in a chunk cache holds no decoded picture, and FFmpeg's
            # frame pool reuses the buffer (kept frames cost ~8% of a loader sample in fresh
            # buffers' page faults).
            frame = self._frames.pop(index, None) if self._intra else self._frames.get(index)
        if frame is None:
            raise VideoError(
                f"H.264 chunk ({self._size_bytes} bytes) decoded to {self._frame_count} frames; "
                f"frame {index} was asked for"
            )
        return frame

    def _decode_to(self, index: int) -> None:
        """Decode frames until frame `index` is out, or the chunk ends (then drain it)."""
        if self._frame_count is not None and index >= self._frame_count:
            return
        start = self._keyframes[bisect.bisect_right(self._keyframes, index) - 1]
        if self._intra:
            ctx = _THREAD.shared_decoder()
            next_packet = next_frame = start
        else:
            own_ctx, cursor = self._ctx, self._cursor
            if own_ctx is None or cursor is None or not start <= cursor[1] <= index:
                # a keyframe resets the references; a context holding delayed frames cannot be reused
                if own_ctx is None or cursor is None or cursor[0] != cursor[1]:
                    own_ctx = _new_decoder()
                cursor = (start, start)
            ctx = own_ctx
            next_packet, next_frame = cursor
            self._ctx, self._cursor = None, None  # unknown until this decode ends cleanly
        try:
            while next_frame <= index and next_packet < len(self._packets):
                unit = self._packets[next_packet]
                if isinstance(unit, av.Packet):
                    packet = unit
                else:
                    start, end, _ = unit
                    # any buffer; the stub says bytes
                    packet = av.Packet(memoryview(self._data)[start:end])  # type: ignore[arg-type]
                frames = ctx.decode(packet)
                next_packet += 1
                for frame in frames:
                    self._keep(next_frame, frame)
                    next_frame += 1
            if next_frame <= index:
                # Packets exhausted: drain what the decoder held back. A drained context cannot
                # decode again, so it is dropped.
                for frame in ctx.decode(None):
                    self._keep(next_frame, frame)
                    next_frame += 1
                self._frame_count = next_frame
                if self._intra:
                    _THREAD.reset_decoder()
                return
        except av.FFmpegError as err:
            if self._intra:
                _THREAD.reset_decoder()
            raise VideoError(f"cannot decode H.264 chunk ({self._size_bytes} bytes): {err}") from err
        if self._intra:
            if next_packet != next_frame:  # it holds a delayed frame: not reusable for another chunk
                _THREAD.reset_decoder()
        else:
            self._ctx, self._cursor = ctx, (next_packet, next_frame)

    def _keep(self, index: int, frame: av.VideoFrame) -> None:
        self._frames[index] = frame
        self._frames_decoded += 1

    def rgb(self, index: int, out: np.ndarray | None = None) -> np.ndarray:
        """Frame `index` as uint8 RGB (h, w, 3), converted by swscale (BT.601 limited range,
        within a few levels of `yuv420p_to_rgb`); written into `out` (and returned) when given."""
        with self._lock:
            return frame_to_rgb(self._frame_locked(index), out)

    def yuv(self, index: int) -> np.ndarray:
        """Frame `index` as yuv420p planes, shape (h*3/2, w)."""
        with self._lock:
            return np.asarray(self._frame_locked(index).to_ndarray())
