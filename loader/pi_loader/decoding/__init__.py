"""Decoding: which decoder turns video chunks into frames, and the optional GPU one.

The CPU decoder (PyAV/FFmpeg, `pi_format.video.ChunkDecoder`) runs in the Loader's worker
processes and is the default. `NvdecDecoder` decodes the same chunks on an NVIDIA GPU's NVDEC
through PyNvVideoCodec (`pip install 'pi-lake[gpu]'`), into torch CUDA tensors; `frame_packets`
is what it feeds the GPU, checked first. `resolve_decoder` checks a Loader's `decoder=` choice
against the host; `loader_decoding` is how a Loader runs with "nvdec" (its workers send the
compressed frames, `compressed_samples`; the consumer decodes them). See docs/gpu-decode.md.

Example:
    >>> from pi_loader.decoding import DecoderOptions, resolve_decoder
    >>> resolve_decoder(DecoderOptions(kind="auto"), batch_size=32, frame_height=224).kind
    'cpu'
"""

from pi_loader.decoding._compressed import (
    CompressedImages,
    FrameDecoder,
    LoaderDecoding,
    compressed_samples,
    loader_decoding,
)
from pi_loader.decoding._nvdec import NvdecDecoder
from pi_loader.decoding._options import (
    DECODER_KINDS,
    GPU_WINS,
    DecoderOptions,
    GpuDecoderUnavailableError,
    gpu_unavailable_reason,
    loader_decoder,
    resolve_decoder,
)
from pi_loader.decoding._packets import MAX_CHUNK_FRAMES, ChunkPacketError, FramePackets, frame_packets

__all__ = [
    "DECODER_KINDS",
    "GPU_WINS",
    "MAX_CHUNK_FRAMES",
    "ChunkPacketError",
    "CompressedImages",
    "DecoderOptions",
    "FrameDecoder",
    "FramePackets",
    "GpuDecoderUnavailableError",
    "LoaderDecoding",
    "NvdecDecoder",
    "compressed_samples",
    "frame_packets",
    "gpu_unavailable_reason",
    "loader_decoder",
    "loader_decoding",
    "resolve_decoder",
]
