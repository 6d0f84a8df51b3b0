"""`frame_to_rgb(frame, out)` writes PyAV's rgb24 pixels into the caller's array: one memcpy when
swscale's rows carry no padding and `out` is contiguous (a batch row), the strided copy
otherwise; a wrong `out` is refused and left untouched."""

from __future__ import annotations

import numpy as np
import pytest
from pi_format.video import ChunkDecoder, encode_chunks, frame_to_rgb


def _frames(n: int, h: int, w: int) -> list[np.ndarray]:
    rng = np.random.default_rng(h * 1000 + w)
    return [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for _ in range(n)]


@pytest.mark.parametrize(("h", "w"), [(32, 32), (18, 34), (24, 40), (64, 96), (20, 22)])
def test_rgb_into_out_equals_pyav(h: int, w: int) -> None:
    chunk = encode_chunks(_frames(2, h, w), width=w, height=h, fps=15.0, chunk_frames=2)[0]
    for frame in ChunkDecoder(chunk.data).all_frames():
        want = frame.to_ndarray(format="rgb24")
        batch = np.full((3, h, w, 3), 7, np.uint8)  # rows either side must stay as they were
        assert frame_to_rgb(frame, batch[1]) is not None
        np.testing.assert_array_equal(batch[1], want)
        assert (batch[0] == 7).all() and (batch[2] == 7).all()
        strided = np.zeros((h, w, 4), np.uint8)[:, :, :3]  # not contiguous: the strided copy
        frame_to_rgb(frame, strided)
        np.testing.assert_array_equal(strided, want)


def test_a_wrong_out_is_refused_untouched() -> None:
    chunk = encode_chunks(_frames(1, 32, 32), width=32, height=32, fps=15.0, chunk_frames=1)[0]
    (frame,) = ChunkDecoder(chunk.data).all_frames()
    bads = (np.zeros((32, 31, 3), np.uint8), np.zeros((32, 32, 3), np.float32), np.zeros((32, 32), np.uint8))
    for bad in bads:
        before = bad.copy()
        with pytest.raises(ValueError, match="out must be uint8"):
            frame_to_rgb(frame, bad)
        np.testing.assert_array_equal(bad, before)
