"""What a GPU decoder is fed for one frame of a lake video chunk: the chunk's access units from
the keyframe at or before the frame up to the frame, checked before any byte reaches the GPU.

A lake chunk is an H.264 Annex-B elementary stream whose first frame is an IDR (SPEC.md §7.2), so
it needs no demuxer: NVDEC takes its access units as they are. The units are the ones the CPU
decoder feeds FFmpeg (`pi_format.video.reader.access_unit_bounds`, the same scan), so both
decoders see the same bytes for the same frame. What does not look like a lake chunk is refused
here with the reason (`ChunkPacketError`) rather than handed to the hardware decoder, whose
errors say little: an empty or oversize chunk (refused before it is scanned), bytes that are not
Annex-B, a chunk whose first frame is not an IDR or that carries no SPS/PPS before it, fewer
access units than the row promises (a cut chunk), a frame past the chunk's end. A chunk cut
inside its last slice still has every unit; the chunk's CRC (checked by the reader before any
decode) and the decoder's own error catch that.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pi_format.video.reader import access_unit_bounds

from pi_loader._errors import PiLoaderError

_START_CODE = b"\x00\x00\x01"
_SPS, _PPS, _SLICE, _IDR = 7, 8, 1, 5
# The most access units (frames) one chunk may hold: the writer's chunks hold video_chunk_frames
# (10 by default, at most a few hundred); a count past this is not a lake chunk, and bounds the
# per-frame work of a hostile one.
MAX_CHUNK_FRAMES = 4096


class ChunkPacketError(PiLoaderError, ValueError):
    """A video chunk that is not fit to send to the GPU decoder (see `frame_packets`)."""


@dataclass(frozen=True, slots=True)
class FramePackets:
    """The packets that decode frame `frame_index` of a chunk, in order.

    Attributes:
        units: (start, end) byte ranges of the chunk, one access unit each, from the keyframe at
            or before the frame to the frame; the first is an IDR.
        parameter_sets: (start, end) of the chunk's SPS and PPS, fed before `units[0]` when that
            unit does not carry its own (None when it does: x264 repeats them in every IDR).
        output_index: which of the frames the units decode (in decode order) is the one asked.
        frame_count: access units (frames) the whole chunk holds.
    """

    units: tuple[tuple[int, int], ...]
    parameter_sets: tuple[int, int] | None
    output_index: int
    frame_count: int

    def byte_ranges(self) -> list[tuple[int, int]]:
        """Every byte range of the chunk that is fed, in order (the parameter sets first when
        needed)."""
        head = [] if self.parameter_sets is None else [self.parameter_sets]
        return [*head, *self.units]

    def payloads(self, data: bytes) -> list[bytes | memoryview]:
        """The packets to feed, one per access unit, as views of `data`; when the keyframe lacks
        its own SPS/PPS, the chunk's are put in front of it in the first packet (a copy: a packet
        of parameter sets alone is not a picture, and decoders refuse it)."""
        view = memoryview(data)
        out: list[bytes | memoryview] = [view[start:end] for start, end in self.units]
        if self.parameter_sets is not None:
            (ps_start, ps_end), (start, end) = self.parameter_sets, self.units[0]
            out[0] = data[ps_start:ps_end] + data[start:end]
        return out


def frame_packets(
    data: bytes | bytearray | memoryview,
    frame_index: int,
    *,
    frame_count: int | None = None,
    max_chunk_bytes: int = 64 * 2**20,
    units: Sequence[tuple[int, int, int]] | None = None,
) -> FramePackets:
    """The access units to feed a GPU decoder for frame `frame_index` of the chunk `data`.

    Args:
        data: the chunk's bytes (an H.264 Annex-B elementary stream, as the lake stores it).
        frame_index: the frame of the chunk asked for (0-based within the chunk).
        frame_count: the frames the chunk's row promises (its `frame_count`); a chunk with fewer
            access units is refused as cut. None: not checked.
        max_chunk_bytes: a longer chunk is refused before it is scanned.
        units: the chunk's `access_unit_bounds` when known (the reader keeps them per chunk).

    Raises:
        ChunkPacketError: the chunk is not fit for the GPU decoder; the message says why.
        TypeError: `data` is not bytes-like, or `frame_index` not an int.

    Example:
        >>> packets = frame_packets(chunk.data, 3, frame_count=10)
        >>> packets.units, packets.output_index     # intra-only: ((start, end),), 0
    """
    if not isinstance(data, bytes | bytearray | memoryview):
        raise TypeError(f"chunk data must be bytes, got {type(data).__name__}")
    if isinstance(frame_index, bool) or not isinstance(frame_index, int):
        raise TypeError(f"frame_index must be an int, got {type(frame_index).__name__}")
    size = len(data)
    if size == 0:
        raise ChunkPacketError("video chunk is empty (0 bytes): nothing to decode")
    if size > max_chunk_bytes:
        raise ChunkPacketError(
            f"video chunk is {size} bytes, over max_chunk_bytes={max_chunk_bytes}: not a lake chunk "
            "(raise DecoderOptions.max_chunk_bytes if the lake really holds chunks this large)"
        )
    if frame_index < 0:
        raise ChunkPacketError(f"frame_index must be >= 0, got {frame_index}")
    raw = bytes(data) if not isinstance(data, bytes) else data
    bounds = access_unit_bounds(raw) if units is None else [(int(s), int(e), int(k)) for s, e, k in units]
    if bounds is None:
        raise ChunkPacketError(
            f"video chunk ({size} bytes) is not an H.264 Annex-B stream as pi-lake writes it (no start "
            f"code at its head, a NAL cut at its header, or no picture slice; it starts {raw[:8].hex()}); "
            'decode it with decoder="cpu", whose FFmpeg parser says more'
        )
    if len(bounds) > MAX_CHUNK_FRAMES:
        raise ChunkPacketError(
            f"video chunk holds {len(bounds)} access units, over {MAX_CHUNK_FRAMES}: not a lake chunk"
        )
    if frame_count is not None and len(bounds) != frame_count:
        raise ChunkPacketError(
            f"video chunk ({size} bytes) holds {len(bounds)} access units, its row promises "
            f"{frame_count} frames: the chunk is cut or padded (check it with pilake verify)"
        )
    if frame_index >= len(bounds):
        raise ChunkPacketError(f"video chunk holds {len(bounds)} frames; frame {frame_index} was asked for")
    if not bounds[0][2]:
        raise ChunkPacketError(
            f"video chunk ({size} bytes) does not start with an IDR frame: it does not decode on its "
            "own (a lake chunk always does, SPEC.md §7.2)"
        )
    key = max(i for i in range(frame_index + 1) if bounds[i][2])
    picked = tuple((s, e) for s, e, _ in bounds[key : frame_index + 1])
    first_types = _nal_types(raw, *picked[0])
    parameter_sets = None
    if not {_SPS, _PPS} <= set(first_types[: first_types.index(_IDR)] if _IDR in first_types else ()):
        parameter_sets = _parameter_sets(raw, *bounds[0][:2])
        if parameter_sets is None:
            raise ChunkPacketError(
                f"video chunk ({size} bytes) carries no SPS and PPS before its first IDR slice: a "
                "decoder cannot start on it"
            )
    return FramePackets(picked, parameter_sets, frame_index - key, len(bounds))


def _nal_types(data: bytes, start: int, end: int) -> list[int]:
    types: list[int] = []
    pos = data.find(_START_CODE, start, end)
    while pos >= 0 and pos + 3 < end:
        types.append(data[pos + 3] & 0x1F)
        pos = data.find(_START_CODE, pos + 3, end)
    return types


def _parameter_sets(data: bytes, start: int, end: int) -> tuple[int, int] | None:
    """(start, end) of the SPS/PPS run at the head of the first access unit, up to its first
    slice; None when it lacks either."""
    seen: set[int] = set()
    pos = data.find(_START_CODE, start, end)
    while pos >= 0 and pos + 3 < end:
        nal = data[pos + 3] & 0x1F
        if nal in (_SLICE, _IDR):
            first_slice = pos - 1 if pos > start and data[pos - 1] == 0 else pos
            return (start, first_slice) if {_SPS, _PPS} <= seen else None
        seen.add(nal)
        pos = data.find(_START_CODE, pos + 3, end)
    return None
