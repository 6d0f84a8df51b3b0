"""Lake video chunks decoded on the GPU by NVDEC (PyNvVideoCodec), straight into a torch CUDA
batch: the optional decoder of issue 35 item 3 (`pi-lake[gpu]`).

A chunk is an H.264 Annex-B elementary stream, so the compressed bytes go to the hardware
decoder with no demuxer: `frame_packets` picks the access units of the asked frame (the same the
CPU decoder feeds FFmpeg) and refuses what is not a lake chunk before it reaches the GPU; each
unit becomes one `PyNvVideoCodec.PacketData` pointing at the chunk's bytes. NVDEC converts to
interleaved RGB on the GPU and hands the frame over by DLPack; it is copied into the batch's row
on the same CUDA stream and context as torch (the decoder reuses its surfaces). One decoder per
frame size is kept (creating one costs milliseconds); the lake writes no B-frames (x264
bframes=0), so the decoder runs in low-latency mode and every packet's frame comes out as it is
fed.

PyNvVideoCodec and torch are imported only when a decoder is made; `import pi_loader` never
loads them.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from pi_loader._errors import PiLoaderError
from pi_loader.decoding._options import DecoderOptions, GpuDecoderUnavailableError, resolve_decoder
from pi_loader.decoding._packets import frame_packets


class NvdecDecoder:
    """RGB frames of lake video chunks decoded by the GPU's NVDEC, as a torch uint8 CUDA tensor.

    Not thread-safe across threads sharing one instance (a lock serialises calls); make one per
    process, in the process that owns the CUDA context (a trainer's main process), never in a
    forked worker.

    Args:
        options: DecoderOptions with kind "nvdec" (or "auto"; the device ordinal and chunk size
            limit are taken from it). Default: DecoderOptions(kind="nvdec").

    Raises:
        GpuDecoderUnavailableError: no CUDA device, no PyNvVideoCodec or no CUDA torch here.

    Example:
        >>> decoder = NvdecDecoder()
        >>> batch = decoder.decode([(chunk.data, 3), (other.data, 0)], width=224, height=224)
        >>> batch.shape, batch.device          # (2, 224, 224, 3), cuda:0
    """

    def __init__(self, options: DecoderOptions | None = None) -> None:
        options = options if options is not None else DecoderOptions(kind="nvdec")
        if options.kind == "cpu":
            raise ValueError('NvdecDecoder needs DecoderOptions(kind="nvdec"), got kind="cpu"')
        resolved = resolve_decoder(
            DecoderOptions(kind="nvdec", device=options.device, max_chunk_bytes=options.max_chunk_bytes),
            batch_size=1,
            frame_height=0,
        )
        import PyNvVideoCodec as nvc  # type: ignore[import-not-found]
        import torch

        self._nvc: Any = nvc
        self._torch: Any = torch
        self._options = resolved
        self._device = torch.device("cuda", resolved.device)
        self._decoders: dict[tuple[int, int], Any] = {}
        self._lock = threading.Lock()
        self.frames_decoded = 0  # frames NVDEC decoded (a GOP chunk's frame costs its predecessors)

    @property
    def device(self) -> Any:
        """The torch.device the frames are on."""
        return self._device

    def _decoder(self, width: int, height: int) -> Any:
        decoder = self._decoders.get((width, height))
        if decoder is None:
            nvc, torch = self._nvc, self._torch
            try:
                decoder = nvc.CreateDecoder(
                    gpuid=self._options.device,
                    codec=nvc.cudaVideoCodec.H264,
                    cudacontext=_torch_context(torch, self._device),
                    cudastream=torch.cuda.current_stream(self._device).cuda_stream,
                    usedevicememory=True,
                    outputColorType=nvc.OutputColorType.RGB,
                    latency=nvc.DisplayDecodeLatencyType.LOW,
                )
            except Exception as err:  # the library raises RuntimeError and its own types
                raise GpuDecoderUnavailableError(
                    f"PyNvVideoCodec could not make an H.264 decoder on CUDA device "
                    f"{self._options.device}: {err}"
                ) from err
            self._decoders[(width, height)] = decoder
        return decoder

    def decode(
        self,
        frames: Sequence[tuple[bytes, int]],
        *,
        width: int,
        height: int,
        frame_count: int | None = None,
        out: Any = None,
    ) -> Any:
        """Frame `i` of each (chunk bytes, i), decoded on the GPU, as uint8 [B, height, width, 3].

        Args:
            frames: (chunk data, frame index within the chunk) per batch row.
            width: the chunks' frame width (the video rows' `width`).
            height: the chunks' frame height (the video rows' `height`).
            frame_count: frames each chunk's row promises (checked; None: not checked).
            out: a CUDA uint8 tensor [B, height, width, 3] to write into (a preallocated batch).

        Raises:
            ChunkPacketError: a chunk that is not fit for the GPU (refused before it is sent).
            PiLoaderError: NVDEC did not return the frame, or returned another size.
        """
        torch = self._torch
        if out is None:
            out = torch.empty((len(frames), height, width, 3), dtype=torch.uint8, device=self._device)
        elif tuple(out.shape) != (len(frames), height, width, 3) or out.dtype != torch.uint8:
            raise ValueError(
                f"out must be uint8 {(len(frames), height, width, 3)}, got {out.dtype} {tuple(out.shape)}"
            )
        with self._lock:
            decoder = self._decoder(width, height)
            for row, (data, index) in enumerate(frames):
                self._decode_one(decoder, data, index, width, height, frame_count, out[row])
        return out

    def _decode_one(
        self,
        decoder: Any,
        data: bytes,
        index: int,
        width: int,
        height: int,
        frame_count: int | None,
        row: Any,
    ) -> None:
        packets = frame_packets(
            data, index, frame_count=frame_count, max_chunk_bytes=self._options.max_chunk_bytes
        )
        # The packets point into these arrays (views of the chunk): kept alive until decoded.
        arrays = [np.frombuffer(payload, dtype=np.uint8) for payload in packets.payloads(bytes(data))]
        decoded: list[Any] = []
        try:
            for array in arrays:
                packet = self._nvc.PacketData()
                packet.bsl_data = array.ctypes.data
                packet.bsl = array.size
                decoded.extend(decoder.Decode(packet))
                if len(decoded) > packets.output_index:
                    break
            if len(decoded) <= packets.output_index:
                # The frame is still held (a parser that waits for the next start code): an empty
                # packet ends the stream and drains it; a drained decoder is not reused.
                self._decoders.pop((width, height), None)
                end = self._nvc.PacketData()
                end.bsl, end.bsl_data = 0, 0
                decoded.extend(decoder.Decode(end))
        except Exception as err:
            self._decoders.pop((width, height), None)  # its state is unknown after an error
            raise PiLoaderError(
                f"NVDEC could not decode frame {index} of a {len(data)}-byte chunk: {err}"
            ) from err
        if len(decoded) <= packets.output_index:
            raise PiLoaderError(
                f"NVDEC returned {len(decoded)} frames for frame {index} of a {len(data)}-byte chunk "
                f"({len(packets.units)} access units fed): the chunk does not decode on the GPU; "
                'decode it with decoder="cpu"'
            )
        self.frames_decoded += len(decoded)
        frame = self._torch.from_dlpack(decoded[packets.output_index])
        if tuple(frame.shape) != (height, width, 3):
            raise PiLoaderError(
                f"NVDEC decoded a {tuple(frame.shape)} frame, the chunk's row says {height}x{width}x3"
            )
        row.copy_(frame)  # on the decoder's stream (torch's current one): before the surface is reused


def _torch_context(torch: Any, device: Any) -> int:
    """The CUDA context torch runs on for `device` (its primary context), as a handle for
    PyNvVideoCodec: the decoder, its frames and torch's stream must share one context. 0 (the
    library picks the device's primary context itself) when it cannot be read."""
    import ctypes

    with torch.cuda.device(device):
        torch.empty(1, device=device)  # makes torch's context current on this thread
        try:
            libcuda = ctypes.CDLL("libcuda.so.1")
            handle = ctypes.c_void_p()
            if libcuda.cuCtxGetCurrent(ctypes.byref(handle)) != 0:
                return 0
            return int(handle.value or 0)
        except OSError:
            return 0
