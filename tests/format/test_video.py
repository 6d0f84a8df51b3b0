"""Video codecs: robot MP4 in, independently decodable H.264 chunks out, BT.601 colour path."""

from __future__ import annotations

import av
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pi_format import VideoError
from pi_format.video import (
    ChunkDecoder,
    ChunkedVideoEncoder,
    decode_chunk_rgb,
    decode_chunk_yuv,
    decode_container,
    encode_chunks,
    encode_mp4,
    frame_to_rgb,
    yuv420p_to_rgb,
)
from pi_format.video.reader import access_unit_bounds, split_access_units

H, W = 64, 96
# Bound for crf 20 on these saturated colour waves at 96x64: measured 30.5-32 dB here, where
# 4:2:0 chroma subsampling alone caps it at ~36 dB (crf 0 reached 36.0).
MIN_PSNR_DB = 28.0


def _frames(n: int, h: int = H, w: int = W) -> list[np.ndarray]:
    """Smooth moving colour waves (no hard edges, so chroma subsampling costs little)."""
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float64)
    return [
        np.stack(
            [
                128 + 100 * np.sin((xx + 3 * i) / 9.0),
                128 + 100 * np.sin((yy + 2 * i) / 7.0),
                128 + 100 * np.cos((xx + yy - 4 * i) / 13.0),
            ],
            -1,
        )
        .round()
        .astype(np.uint8)
        for i in range(n)
    ]


def _psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(((a.astype(np.float64) - b.astype(np.float64)) ** 2).mean())
    return float("inf") if mse == 0 else 10 * np.log10(255.0**2 / mse)


def _packets(data: bytes) -> list[av.Packet]:
    ctx = av.CodecContext.create("h264", "r")
    return [*ctx.parse(data), *ctx.parse(None)]


def test_mp4_round_trip() -> None:
    frames = _frames(12)
    data = encode_mp4(frames, fps=30.0, width=W, height=H)
    decoded = list(decode_container(data))
    assert len(decoded) == len(frames)
    assert all((f.width, f.height, f.format.name) == (W, H, "yuv420p") for f in decoded)
    for got, want in zip(decoded, frames, strict=True):
        assert _psnr(yuv420p_to_rgb(got.to_ndarray(), H, W), want) > MIN_PSNR_DB


def test_mp4_resizes_to_requested_size() -> None:
    data = encode_mp4(_frames(3, 32, 48), fps=10.0, width=W, height=H)
    assert [(f.width, f.height) for f in decode_container(data)] == [(W, H)] * 3


def test_decode_container_rejects_junk() -> None:
    with pytest.raises(VideoError, match="cannot decode video container"):
        list(decode_container(b"not a video at all" * 10))


@pytest.mark.parametrize(("n", "chunk_frames"), [(25, 10), (10, 10), (3, 1), (7, 10)])
def test_chunks_decode_independently(n: int, chunk_frames: int) -> None:
    frames = _frames(n)
    chunks = encode_chunks(frames, width=W, height=H, fps=30.0, chunk_frames=chunk_frames)
    expected_counts = [min(chunk_frames, n - s) for s in range(0, n, chunk_frames)]
    assert [c.frame_count for c in chunks] == expected_counts
    assert [c.chunk_index for c in chunks] == list(range(len(chunks)))
    assert [c.first_frame for c in chunks] == list(range(0, n, chunk_frames))
    # Decode in reverse order, each with a fresh decoder: no chunk depends on another.
    for chunk in reversed(chunks):
        packets = _packets(chunk.data)
        assert len(packets) == chunk.frame_count
        assert packets[0].is_keyframe
        assert chunk.data.startswith(b"\x00\x00\x00\x01") or chunk.data.startswith(b"\x00\x00\x01")
        planes = decode_chunk_yuv(chunk.data)
        assert len(planes) == chunk.frame_count
        assert all(p.shape == (H * 3 // 2, W) and p.dtype == np.uint8 for p in planes)
        rgb = decode_chunk_rgb(chunk.data, height=H, width=W)
        for i, frame in enumerate(rgb):
            assert frame.shape == (H, W, 3)
            assert _psnr(frame, frames[chunk.first_frame + i]) > MIN_PSNR_DB


def test_chunk_starts_with_sps_pps_idr() -> None:
    chunk = encode_chunks(_frames(4), width=W, height=H, fps=30.0, chunk_frames=2)[1]
    # NAL unit types in order of appearance: SPS (7) and PPS (8) come before the IDR slice (5).
    nal_types = [b & 0x1F for b in _nal_heads(chunk.data)]
    assert 7 in nal_types and 8 in nal_types and 5 in nal_types
    assert nal_types.index(7) < nal_types.index(5) and nal_types.index(8) < nal_types.index(5)


def _nal_heads(data: bytes) -> list[int]:
    heads, i = [], data.find(b"\x00\x00\x01")
    while i != -1 and i + 3 < len(data):
        heads.append(data[i + 3])
        i = data.find(b"\x00\x00\x01", i + 3)
    return heads


def test_chunked_encoder_context_manager_and_resize() -> None:
    with ChunkedVideoEncoder(width=W, height=H, fps=15.0, chunk_frames=4) as enc:
        chunks = [c for f in _frames(6, 32, 48) for c in enc.add(f)]
    chunks += enc.chunks_at_close
    assert [c.frame_count for c in chunks] == [4, 2]
    assert len(decode_chunk_yuv(chunks[1].data)) == 2


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"width": 0}, "width and height must be positive and even"),
        ({"height": 63}, "width and height must be positive and even"),
        ({"chunk_frames": 0}, "chunk_frames must be >= 1"),
        ({"crf": 52}, r"crf must be in \[0, 51\]"),
        ({"keyframe_interval": 3}, "keyframe_interval must be >= 1 and divide chunk_frames=10"),
        ({"keyframe_interval": 0}, "keyframe_interval must be >= 1 and divide chunk_frames=10"),
    ],
)
def test_chunked_encoder_validation(kwargs: dict[str, int], match: str) -> None:
    args = {"width": W, "height": H, "fps": 30.0, "chunk_frames": 10, "crf": 20, **kwargs}
    with pytest.raises(ValueError, match=match):
        ChunkedVideoEncoder(**args)  # type: ignore[arg-type]


def test_non_rgb_frames_are_refused() -> None:
    with pytest.raises(VideoError, match="frames must be uint8 RGB"):
        encode_chunks([np.zeros((H, W), np.uint8)], width=W, height=H, fps=30.0)
    with pytest.raises(VideoError, match="frames must be uint8 RGB"):
        encode_chunks([np.zeros((H, W, 3), np.float32)], width=W, height=H, fps=30.0)


def test_decode_chunk_rejects_junk() -> None:
    # Junk without start codes parses to nothing; junk after a start code must raise, not hang.
    assert decode_chunk_yuv(b"") == []
    with pytest.raises(VideoError):
        decode_chunk_yuv(b"\x00\x00\x00\x01\x65" + bytes(range(256)) * 4)


def test_yuv_to_rgb_matches_pyav_conversion() -> None:
    data = encode_mp4(_frames(6), fps=30.0, width=W, height=H)
    for frame in decode_container(data):
        ours = yuv420p_to_rgb(frame.to_ndarray(), H, W).astype(np.int16)
        theirs = frame.to_ndarray(format="rgb24").astype(np.int16)
        diff = np.abs(ours - theirs)
        # swscale rounds differently (fixed point); measured max 3, mean ~1.2 here.
        assert diff.mean() < 2.0
        assert diff.max() <= 6


def test_yuv_to_rgb_reference_values() -> None:
    h, w = 2, 4
    yuv = np.empty((3, w), np.uint8)
    yuv[:2] = [[16, 16, 235, 235], [16, 16, 235, 235]]  # black | white, limited range
    yuv[2] = [128, 128, 128, 128]  # U plane (1x2) then V plane (1x2), neutral
    rgb = yuv420p_to_rgb(yuv, h, w)
    assert rgb[:, :2].tolist() == [[[0, 0, 0]] * 2] * 2
    assert rgb[:, 2:].tolist() == [[[255, 255, 255]] * 2] * 2
    red = np.array([[81, 81], [81, 81], [90, 240]], np.uint8)  # BT.601 limited-range red
    assert np.abs(yuv420p_to_rgb(red, 2, 2).astype(int) - [255, 0, 0]).max() <= 2


def test_yuv_to_rgb_shape_error() -> None:
    with pytest.raises(ValueError, match=r"must have shape \(6, 4\)"):
        yuv420p_to_rgb(np.zeros((4, 4), np.uint8), 4, 4)


def test_chunk_decoder_decodes_lazily_and_agrees_with_whole_chunk_decoding() -> None:
    frames = _frames(10)
    chunk = encode_chunks(frames, width=W, height=H, fps=30.0, chunk_frames=10)[0]
    decoder = ChunkDecoder(chunk.data)
    assert decoder.frames_decoded == 0
    third = decoder.rgb(3)
    assert decoder.frames_decoded == 4  # frames 0..3 only, nothing after the one asked for
    whole_rgb = decode_chunk_rgb(chunk.data, height=H, width=W)
    whole_yuv = decode_chunk_yuv(chunk.data)
    assert np.array_equal(third, whole_rgb[3])
    assert np.array_equal(decoder.rgb(1), whole_rgb[1])  # going back needs no new decoding
    assert decoder.frames_decoded == 4
    assert np.array_equal(decoder.yuv(9), whole_yuv[9])  # continues from frame 4
    assert decoder.frames_decoded == 10
    # swscale's conversion stays within a few levels of the vectorized numpy one
    assert np.abs(third.astype(int) - yuv420p_to_rgb(whole_yuv[3], H, W).astype(int)).max() <= 3
    with pytest.raises(VideoError, match="frame 10 was asked for"):
        decoder.rgb(10)


def test_chunk_decoder_is_safe_across_threads() -> None:
    from concurrent.futures import ThreadPoolExecutor

    chunk = encode_chunks(_frames(10), width=W, height=H, fps=30.0, chunk_frames=10)[0]
    want = decode_chunk_rgb(chunk.data, height=H, width=W)
    decoder = ChunkDecoder(chunk.data)
    order = [i % 10 for i in range(200)][::-1]
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(decoder.rgb, order))
    assert all(np.array_equal(g, want[i]) for g, i in zip(got, order, strict=True))


@pytest.mark.parametrize("keyframe_interval", [1, 2, 5, 10])
def test_access_unit_split_agrees_with_ffmpeg_parser(keyframe_interval: int) -> None:
    chunks = encode_chunks(
        _frames(23), width=W, height=H, fps=30.0, chunk_frames=10, keyframe_interval=keyframe_interval
    )
    for chunk in chunks:
        units = split_access_units(chunk.data)
        assert units is not None
        packets = _packets(chunk.data)
        assert [bytes(p) for p in packets] == [unit for unit, _ in units]
        assert [key for _, key in units] == [i % keyframe_interval == 0 for i in range(chunk.frame_count)]
        assert ChunkDecoder(chunk.data).intra_only == (keyframe_interval == 1)


def test_access_unit_split_declines_what_is_not_annex_b() -> None:
    assert split_access_units(b"") is None
    assert split_access_units(b"\x01\x00\x00\x01\x65\x88") is None  # bytes before the start code
    assert split_access_units(b"\x00\x00\x01\x67\x42") is None  # parameters, no picture
    assert split_access_units(b"\x00\x00\x01") is None  # a start code with nothing after it


def test_intra_chunks_decode_one_frame_each() -> None:
    chunk = encode_chunks(_frames(10), width=W, height=H, fps=30.0, chunk_frames=10, keyframe_interval=1)[0]
    want = decode_chunk_rgb(chunk.data, height=H, width=W)
    decoder = ChunkDecoder(chunk.data)
    assert np.array_equal(decoder.rgb(7), want[7])
    assert decoder.frames_decoded == 1  # nothing before frame 7 was decoded
    assert np.array_equal(decoder.rgb(2), want[2]) and decoder.frames_decoded == 2
    with pytest.raises(VideoError, match="frame 10 was asked for"):
        decoder.rgb(10)


def test_frame_to_rgb_is_pyav_rgb24_conversion() -> None:
    chunk = encode_chunks(_frames(3), width=W, height=H, fps=30.0, chunk_frames=3)[0]
    for frame in ChunkDecoder(chunk.data).all_frames():
        assert np.array_equal(frame_to_rgb(frame), frame.to_ndarray(format="rgb24"))


_ACCESS_CHUNKS = {
    keyint: encode_chunks(_frames(20), width=W, height=H, fps=30.0, chunk_frames=10, keyframe_interval=keyint)
    for keyint in (1, 5, 10)
}
_ACCESS_WANT = {
    keyint: [decode_chunk_rgb(c.data, height=H, width=W) for c in chunks]
    for keyint, chunks in _ACCESS_CHUNKS.items()
}


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from((1, 5, 10)), st.integers(0, 1), st.integers(0, 9)), min_size=1, max_size=30
    )
)
def test_random_access_across_interleaved_chunks_equals_sequential_decode(
    reads: list[tuple[int, int, int]],
) -> None:
    # Intra chunks share the thread's codec context and GOP chunks keep cursors of their own:
    # any interleaving of reads must give each chunk's frames exactly as a full decode does.
    decoders = {
        (keyint, i): ChunkDecoder(chunk.data)
        for keyint, chunks in _ACCESS_CHUNKS.items()
        for i, chunk in enumerate(chunks)
    }
    for keyint, chunk_index, frame_index in reads:
        got = decoders[(keyint, chunk_index)].rgb(frame_index)
        assert np.array_equal(got, _ACCESS_WANT[keyint][chunk_index][frame_index])


def _decode_in_child(data: bytes, results: object) -> None:
    results.put(decode_chunk_rgb(data, height=H, width=W)[5].sum())  # type: ignore[attr-defined]


def test_decoding_works_in_a_forked_child_after_decoding_in_the_parent() -> None:
    # torch's DataLoader forks workers: FFmpeg thread state made before the fork must not be
    # reused in the child (swscale threads made it wait forever).
    import multiprocessing

    chunk = encode_chunks(_frames(10), width=W, height=H, fps=30.0, chunk_frames=10, keyframe_interval=1)[0]
    want = decode_chunk_rgb(chunk.data, height=H, width=W)[5].sum()
    ctx = multiprocessing.get_context("fork")
    results = ctx.Queue()
    child = ctx.Process(target=_decode_in_child, args=(chunk.data, results))
    child.start()
    child.join(timeout=60)
    if child.is_alive():
        child.kill()
        pytest.fail("decoding in a forked child hung")
    assert child.exitcode == 0 and results.get(timeout=5) == want


@pytest.mark.parametrize("keyframe_interval", [1, 5])
def test_access_unit_bounds_are_the_split_units_without_copies(keyframe_interval: int) -> None:
    # ChunkDecoder slices its packets out of the chunk by these bounds instead of copying each unit.
    chunks = encode_chunks(
        _frames(13), width=W, height=H, fps=30.0, chunk_frames=10, keyframe_interval=keyframe_interval
    )
    for chunk in chunks:
        bounds, units = access_unit_bounds(chunk.data), split_access_units(chunk.data)
        assert bounds is not None and units is not None and len(bounds) == chunk.frame_count
        assert [(chunk.data[start:end], key) for start, end, key in bounds] == units
        # the units tile the chunk: nothing between them, nothing left out at either end
        assert bounds[0][0] == 0 and bounds[-1][1] == len(chunk.data)
        assert [end for _, end, _ in bounds[:-1]] == [start for start, _, _ in bounds[1:]]
    assert access_unit_bounds(b"\x00\x00\x01\x67\x42") is None  # parameters, no picture


def test_intra_chunks_keep_no_decoded_frames_and_gop_chunks_do() -> None:
    # An intra frame decodes alone again at the same cost, so keeping it would only hold memory;
    # a GOP frame costs the frames before it, so those are kept for the next ask.
    frames = _frames(10)
    intra = encode_chunks(frames, width=W, height=H, fps=30.0, chunk_frames=10, keyframe_interval=1)[0]
    decoder = ChunkDecoder(intra.data)
    assert decoder.intra_only
    first = decoder.rgb(4)
    assert decoder.frames_decoded == 1 and decoder._frames == {}
    again = decoder.rgb(4)
    assert np.array_equal(first, again) and decoder.frames_decoded == 2  # decoded once more, not kept
    assert np.array_equal(decoder.rgb(0), decode_chunk_rgb(intra.data, height=H, width=W)[0])
    assert decoder.frames_decoded == 3 and decoder._frames == {}

    gop = encode_chunks(frames, width=W, height=H, fps=30.0, chunk_frames=10, keyframe_interval=5)[0]
    want = decode_chunk_rgb(gop.data, height=H, width=W)
    decoder = ChunkDecoder(gop.data)
    assert not decoder.intra_only
    assert np.array_equal(decoder.rgb(3), want[3]) and decoder.frames_decoded == 4  # frames 0..3
    assert np.array_equal(decoder.rgb(1), want[1])
    assert decoder.frames_decoded == 4  # frame 1 was kept: no decode again from the keyframe
    assert sorted(decoder._frames) == [0, 1, 2, 3]
