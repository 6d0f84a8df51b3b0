"""Which decoder turns a Loader's video chunks into frames: the CPU (PyAV/FFmpeg, the default) or
the GPU's NVDEC (PyNvVideoCodec, the optional `pi-lake[gpu]` extra).

`resolve_decoder` is the one place a choice is checked: "cpu" is always there; "nvdec" is
refused at construction, with what is missing and what to do, on a host without a CUDA GPU or
without the library; "auto" takes the CPU unless a measured decision says the GPU wins
(`GPU_WINS`: empty until `benchmarks/gpu_host/decode.py` has been run on a GPU host and its
figures committed, so "auto" is the CPU today). `pi_loader.decoding._compressed` is how a Loader
runs with "nvdec".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pi_loader._errors import PiLoaderError

DECODER_KINDS = ("cpu", "nvdec", "auto")
# (batch size, frame height) pairs where a committed benchmark (benchmarks/gpu_host/decode.py,
# interleaved repeats, the whole spread) found NVDEC faster than the CPU path on a GPU host.
# Nothing measured yet: "auto" stays on the CPU everywhere.
GPU_WINS: frozenset[tuple[int, int]] = frozenset()


class GpuDecoderUnavailableError(PiLoaderError, RuntimeError):
    """decoder="nvdec" was asked for on a host that cannot decode on the GPU (no CUDA device, no
    PyNvVideoCodec, no torch with CUDA)."""


@dataclass(frozen=True, slots=True)
class DecoderOptions:
    """How a Loader decodes its video chunks.

    Args:
        kind: "cpu" (default: PyAV/FFmpeg in the worker processes, the path every figure of the
            loader benchmark measures), "nvdec" (the GPU's hardware decoder through
            PyNvVideoCodec; refused at construction where it cannot run) or "auto" (the CPU unless
            a committed measurement says the GPU wins for this batch size and frame height:
            `GPU_WINS`, empty today).
        device: the CUDA device ordinal NVDEC decodes on (0: the first GPU, where a one-GPU
            trainer puts its model).
        max_chunk_bytes: the largest chunk sent to the GPU; a bigger one is refused before it is
            scanned or copied (64 MiB: a 10-frame intra-only chunk at 1080p is ~3 MB, so this
            only stops bytes that are not a lake chunk).

    Example:
        >>> DecoderOptions(kind="auto").kind
        'auto'
    """

    kind: str = "cpu"
    device: int = 0
    max_chunk_bytes: int = 64 * 2**20

    def __post_init__(self) -> None:
        if self.kind not in DECODER_KINDS:
            raise ValueError(f"decoder kind must be one of {DECODER_KINDS}, got {self.kind!r}")
        if isinstance(self.device, bool) or not isinstance(self.device, int) or self.device < 0:
            raise ValueError(f"device must be a CUDA device ordinal (an int >= 0), got {self.device!r}")
        if (
            isinstance(self.max_chunk_bytes, bool)
            or not isinstance(self.max_chunk_bytes, int)
            or self.max_chunk_bytes < 1
        ):
            raise ValueError(f"max_chunk_bytes must be an int >= 1, got {self.max_chunk_bytes!r}")


def as_options(decoder: str | DecoderOptions) -> DecoderOptions:
    """`decoder` as DecoderOptions: a kind's name, or the options themselves.

    Raises:
        TypeError: neither a str nor DecoderOptions.
        ValueError: an unknown kind.
    """
    if isinstance(decoder, DecoderOptions):
        return decoder
    if not isinstance(decoder, str):
        raise TypeError(
            f"decoder must be one of {DECODER_KINDS} or a DecoderOptions, got {type(decoder).__name__}"
        )
    return DecoderOptions(kind=decoder)


def gpu_unavailable_reason(device: int = 0) -> str | None:
    """Why this host cannot decode on GPU `device` with NVDEC, or None when it can (torch with
    CUDA sees the device and PyNvVideoCodec imports). Imports torch and PyNvVideoCodec only here.

    Example:
        >>> gpu_unavailable_reason()   # on a laptop without an NVIDIA GPU
        'torch sees no CUDA device (torch 2.13.0+cpu, torch.cuda.is_available() is False)'
    """
    try:
        import torch
    except ImportError:
        return "torch is not installed (NVDEC frames are handed out as torch CUDA tensors)"
    if not torch.cuda.is_available():
        return f"torch sees no CUDA device (torch {torch.__version__}, torch.cuda.is_available() is False)"
    count = torch.cuda.device_count()
    if device >= count:
        return f"CUDA device {device} does not exist (this host has {count})"
    try:
        import PyNvVideoCodec  # type: ignore[import-not-found]  # noqa: F401
    except ImportError as err:
        return f"PyNvVideoCodec does not import ({err})"
    return None


def resolve_decoder(decoder: str | DecoderOptions, *, batch_size: int, frame_height: int) -> DecoderOptions:
    """The decoder a Loader uses: `decoder` checked against this host, "auto" resolved.

    Returns:
        DecoderOptions whose kind is "cpu" or "nvdec".

    Raises:
        GpuDecoderUnavailableError: "nvdec" on a host that cannot run it (the message says what
            is missing and what to do).
        TypeError, ValueError: a decoder that is not a kind or DecoderOptions.

    Example:
        >>> resolve_decoder("auto", batch_size=32, frame_height=224).kind
        'cpu'
    """
    options = as_options(decoder)
    kind = options.kind
    if kind == "auto":
        wins = (batch_size, frame_height) in GPU_WINS
        kind = "nvdec" if wins and gpu_unavailable_reason(options.device) is None else "cpu"
    if kind == "nvdec":
        reason = gpu_unavailable_reason(options.device)
        if reason is not None:
            raise GpuDecoderUnavailableError(
                f'decoder="nvdec" cannot run on this host: {reason}. Install the GPU extra on a host '
                "with an NVIDIA GPU and its driver (pip install 'pi-lake[gpu]' and a CUDA build of "
                'torch), or use decoder="cpu" (the default) or "auto" (the CPU unless the GPU was '
                "measured to win)"
            )
    return DecoderOptions(kind=kind, device=options.device, max_chunk_bytes=options.max_chunk_bytes)


def loader_decoder(
    decoder: str | DecoderOptions, *, batch_size: int, image_shapes: Mapping[str, tuple[int, ...]]
) -> str:
    """The decoder kind ("cpu" or "nvdec") a Loader of these image shapes runs with: `decoder`
    checked against this host, "nvdec" refused where it cannot run (`GpuDecoderUnavailableError`).

    Example:
        >>> loader_decoder("auto", batch_size=32, image_shapes={"observation.images.front": (224, 224, 3)})
        'cpu'
    """
    height = max((shape[-3] for shape in image_shapes.values()), default=0)
    return resolve_decoder(decoder, batch_size=batch_size, frame_height=height).kind
