"""frame_packets: the access units sent to the GPU for one frame, and the chunks it refuses
before they reach the GPU (no GPU needed: the framing is a pure function of the bytes)."""

from __future__ import annotations

import av
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pi_format.video import ChunkDecoder
from pi_format.video.reader import access_unit_bounds
from pi_loader.decoding import ChunkPacketError, FramePackets, frame_packets

from tests.fixtures.lake_factory import FakeLake
from tests.loader.decoding._chunks import chunks

START = b"\x00\x00\x01"


def _decode_alone(data: bytes, packets: FramePackets) -> np.ndarray:
    """The frame the packets decode to on a fresh FFmpeg context fed only those bytes: what a
    fresh NVDEC session gets (the packets must decode on their own)."""
    ctx = av.CodecContext.create("h264", "r")
    decoded: list[av.VideoFrame] = []
    for payload in packets.payloads(data):
        decoded.extend(ctx.decode(av.Packet(bytes(payload))))
    decoded.extend(ctx.decode(None))
    return np.asarray(decoded[packets.output_index].to_ndarray(format="rgb24"))


@pytest.mark.parametrize("keyframe_interval", [1, None], ids=["intra-only", "gop"])
def test_the_packets_are_the_cpu_decoders_access_units_and_decode_the_asked_frame(
    keyframe_interval: int | None,
) -> None:
    for chunk in chunks(keyframe_interval=keyframe_interval):
        cpu = ChunkDecoder(chunk.data)
        bounds = cpu.access_units
        assert bounds is not None and len(bounds) == chunk.frame_count
        for i in range(chunk.frame_count):
            packets = frame_packets(chunk.data, i, frame_count=chunk.frame_count)
            key = i if keyframe_interval == 1 else 0
            assert packets.units == tuple((s, e) for s, e, _ in bounds[key : i + 1])
            assert packets.output_index == i - key
            assert packets.parameter_sets is None  # x264 repeats SPS/PPS in every IDR
            np.testing.assert_array_equal(_decode_alone(chunk.data, packets), cpu.rgb(i))


def _strip_parameter_sets(data: bytes, keep_first: bool) -> bytes:
    """The chunk without its SPS/PPS NALs (in every access unit but the first when keep_first)."""
    bounds = access_unit_bounds(data)
    assert bounds is not None
    out = bytearray()
    for n, (start, end, _) in enumerate(bounds):
        unit = data[start:end]
        positions = [p for p in range(len(unit) - 3) if unit[p : p + 3] == START]
        nals = []
        for a, b in zip(positions, [*positions[1:], len(unit)], strict=True):
            a = a - 1 if a and unit[a - 1] == 0 else a
            nals.append(unit[a:b])
        for nal in nals:
            nal_type = nal[nal.index(START) + 3] & 0x1F
            if nal_type in (7, 8) and not (keep_first and n == 0):
                continue
            out += nal
    return bytes(out)


def test_a_keyframe_without_its_own_parameter_sets_gets_the_chunks_first_ones() -> None:
    chunk = chunks()[0]
    data = _strip_parameter_sets(chunk.data, keep_first=True)
    packets = frame_packets(data, 4, frame_count=10)
    assert packets.parameter_sets is not None and packets.parameter_sets[0] == 0
    np.testing.assert_array_equal(_decode_alone(data, packets), ChunkDecoder(chunk.data).rgb(4))
    with pytest.raises(ChunkPacketError, match="no SPS and PPS before its first IDR"):
        frame_packets(_strip_parameter_sets(chunk.data, keep_first=False), 4)


def test_hostile_chunks_are_refused_before_the_gpu_and_a_good_one_beside_them_passes() -> None:
    good = chunks()[0]
    gop = chunks(keyframe_interval=None)[0]
    bounds = access_unit_bounds(gop.data)
    assert bounds is not None
    cases: list[tuple[object, object, dict[str, object], type[Exception], str]] = [
        (b"", 0, {}, ChunkPacketError, r"empty \(0 bytes\)"),
        (good.data, 0, {"max_chunk_bytes": 1000}, ChunkPacketError, "over max_chunk_bytes=1000"),
        (b"\x00" * 2000, 0, {"max_chunk_bytes": 1000}, ChunkPacketError, "over max_chunk_bytes"),
        (b"\xff" * 500, 0, {}, ChunkPacketError, "not an H.264 Annex-B stream"),
        (b"GIF89a" + good.data, 0, {}, ChunkPacketError, "it starts 474946"),
        (good.data[: len(good.data) // 2], 0, {"frame_count": 10}, ChunkPacketError, "cut or padded"),
        (good.data + START, 0, {}, ChunkPacketError, "NAL cut at its header"),
        (good.data, 10, {}, ChunkPacketError, "holds 10 frames; frame 10 was asked"),
        (good.data, -1, {}, ChunkPacketError, "frame_index must be >= 0"),
        (gop.data[bounds[1][0] :], 0, {}, ChunkPacketError, "does not start with an IDR"),
        (good.data * 500, 0, {}, ChunkPacketError, "over 4096"),
        ("text", 0, {}, TypeError, "chunk data must be bytes"),
        (good.data, 1.0, {}, TypeError, "frame_index must be an int"),
    ]
    for data, index, kwargs, error, message in cases:
        with pytest.raises(error, match=message):
            frame_packets(data, index, **kwargs)  # type: ignore[arg-type]
        assert frame_packets(good.data, 3, frame_count=10).units  # the good chunk beside it


@settings(max_examples=150, deadline=None)
@given(
    junk=st.binary(max_size=4096),
    cut=st.integers(min_value=0, max_value=10**6),
    splice=st.booleans(),
    index=st.integers(min_value=0, max_value=12),
)
def test_generated_bytes_are_refused_clearly_or_framed_inside_the_chunk(
    junk: bytes, cut: int, splice: bool, index: int
) -> None:
    """Random bytes, and a real chunk cut at a random place with random bytes spliced in: either
    a ChunkPacketError or packets whose byte ranges lie inside the data, in order."""
    good = chunks()[0].data
    data = (good[: cut % len(good)] + junk) if splice else junk
    try:
        packets = frame_packets(data, index, max_chunk_bytes=len(good) + 4096)
    except ChunkPacketError:
        return
    ranges = packets.byte_ranges()
    assert all(0 <= s < e <= len(data) for s, e in ranges)
    assert 0 <= packets.output_index < len(packets.units) and index < packets.frame_count


def test_every_chunk_of_a_written_lake_frames_and_decodes_as_the_loader_does(loader_lake: FakeLake) -> None:
    """The chunks the lake's writer stored (read back from the video table): for every frame of
    every chunk, the packets `frame_packets` picks decode alone to the CPU decoder's frame."""
    import deltalake

    rows = deltalake.DeltaTable(loader_lake.layout.table("video")).to_pyarrow_table(
        columns=["codec", "frame_count", "data"]
    )
    assert rows.num_rows > 0
    for row in rows.to_pylist()[:12]:
        assert row["codec"] == "h264"
        cpu = ChunkDecoder(row["data"])
        for i in range(row["frame_count"]):
            packets = frame_packets(row["data"], i, frame_count=row["frame_count"])
            np.testing.assert_array_equal(_decode_alone(row["data"], packets), cpu.rgb(i))
