"""NvdecDecoder on a GPU: frames decoded by NVDEC match the CPU decoder's within a tolerance.

These run only where a CUDA GPU, a CUDA torch and PyNvVideoCodec are present (the lent GPU host;
`pip install 'pi-lake[gpu]'`); elsewhere they are skipped with the missing piece named. The
refusals that need no GPU are in test_options.py and test_packets.py.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from pi_format.video import ChunkDecoder
from pi_loader.decoding import ChunkPacketError, DecoderOptions, NvdecDecoder, gpu_unavailable_reason

from tests.loader.decoding._chunks import chunks

MISSING = gpu_unavailable_reason()
pytestmark = pytest.mark.skipif(
    MISSING is not None, reason=f"needs a CUDA GPU with NVDEC and PyNvVideoCodec: {MISSING}"
)
# NVDEC's YUV->RGB conversion is not swscale's (its own rounding, and BT.601 vs BT.709 from the
# stream's colour description): a few levels apart on average. A wrong frame of these chunks is
# tens of levels away (each frame's gradient moves 23 levels).
MEAN_LEVELS = 4.0


@pytest.fixture(scope="module")
def decoder() -> NvdecDecoder:
    return NvdecDecoder(DecoderOptions(kind="nvdec"))


def _host(tensor: Any) -> np.ndarray:
    return np.asarray(tensor.cpu().numpy())


@pytest.mark.parametrize("size", [(224, 224), (640, 480)], ids=["224px", "480p"])
@pytest.mark.parametrize("keyframe_interval", [1, None], ids=["intra-only", "gop"])
def test_gpu_frames_match_the_cpu_decoders_frame_by_frame(
    decoder: NvdecDecoder, size: tuple[int, int], keyframe_interval: int | None
) -> None:
    width, height = size
    made = chunks(width=width, height=height, keyframe_interval=keyframe_interval)
    # a shuffled batch: frames from both chunks, out of order, one chunk's frame twice
    wanted = [(1, 7), (0, 3), (0, 9), (1, 0), (0, 0), (1, 7), (0, 5)]
    batch = decoder.decode([(made[c].data, f) for c, f in wanted], width=width, height=height, frame_count=10)
    assert tuple(batch.shape) == (len(wanted), height, width, 3) and str(batch.device).startswith("cuda")
    got = _host(batch)
    cpu = {c: [ChunkDecoder(made[c].data).rgb(f) for f in range(10)] for c in (0, 1)}
    for row, (c, f) in enumerate(wanted):
        diffs = [np.abs(got[row].astype(np.int16) - frame.astype(np.int16)).mean() for frame in cpu[c]]
        assert diffs[f] < MEAN_LEVELS, (row, c, f, diffs[f])
        assert int(np.argmin(diffs)) == f  # the GPU frame is the asked one, not a neighbour


def test_a_hostile_chunk_is_refused_before_the_gpu_and_the_decoder_goes_on(decoder: NvdecDecoder) -> None:
    good = chunks(width=224, height=224)[0]
    for bad in (b"", b"\xff" * 4096, good.data[: len(good.data) // 2]):
        with pytest.raises(ChunkPacketError):
            decoder.decode([(good.data, 1), (bad, 0)], width=224, height=224, frame_count=10)
    batch = decoder.decode([(good.data, 2)], width=224, height=224, frame_count=10)
    cpu = ChunkDecoder(good.data).rgb(2)
    assert np.abs(_host(batch)[0].astype(np.int16) - cpu.astype(np.int16)).mean() < MEAN_LEVELS


def test_into_a_preallocated_batch(decoder: NvdecDecoder) -> None:
    import torch

    good = chunks(width=224, height=224)[0]
    out = torch.zeros((2, 224, 224, 3), dtype=torch.uint8, device=decoder.device)
    assert decoder.decode([(good.data, 0), (good.data, 9)], width=224, height=224, out=out) is out
    assert int(out[1].float().mean().item()) > 0
    with pytest.raises(ValueError, match="out must be uint8"):
        decoder.decode([(good.data, 0)], width=224, height=224, out=out)
