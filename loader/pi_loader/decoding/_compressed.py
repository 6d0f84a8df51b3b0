"""A Loader decoding on the GPU: its workers hand out compressed frames, its consumer decodes.

With `Loader(decoder="nvdec")` a worker builds each batch as on the CPU path (the same steps,
actions, ids, order and checks) except its images: for every frame it reads the chunk (its CRC
checked by the reader, as for the CPU), picks the access units that decode the frame
(`frame_packets`: the keyframe at or before it up to it; refused there, in the worker, when
the chunk is not fit for the GPU) and sends only those bytes, a few kB a frame, with the
frame's place in the batch (`CompressedImages`). Nothing is decoded in the worker. The process
that iterates the Loader then decodes each image key on the GPU (`LoaderDecoding.finish`, with
an `NvdecDecoder` made once there, which owns the CUDA context) into a uint8 tensor of the
same shape the CPU path gives; every other key is the CPU path's array, unchanged.

The worker's builder swaps the image step of the Dataset's gather for `_compressed_images`
on a shallow copy (same readers, same caches): pi_loader.decoding sits beside pi_loader.samples
(import-linter layers), so it reaches the gather by its attributes, and
tests/loader/decoding/test_loader_gpu.py fails if they drift.
"""

from __future__ import annotations

import copy
import types
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from pi_loader._errors import PiLoaderError
from pi_loader.decoding._options import DecoderOptions, loader_decoder
from pi_loader.decoding._packets import frame_packets

_IMAGE_KEY_PREFIX = "observation.images."  # pi_loader.samples._gather.IMAGE_KEY_PREFIX


@runtime_checkable
class FrameDecoder(Protocol):
    """What decodes a batch's compressed frames in the consumer process: `NvdecDecoder`, or
    any object with its `decode` and `device` (a Loader takes one as `decoder=`)."""

    @property
    def device(self) -> Any: ...

    def decode(
        self,
        frames: Sequence[tuple[bytes, int]],
        *,
        width: int,
        height: int,
        frame_count: int | None = None,
        out: Any = None,
    ) -> Any: ...


@dataclass(frozen=True, slots=True)
class CompressedImages:
    """One image key of a batch as compressed frames (what a worker sends instead of pixels).

    Attributes:
        shape: the image array's shape on the CPU path: (B, H, W, 3), or (B, k+1, H, W, 3).
        payloads: distinct frames' bytes: the access units that decode each (an Annex-B stream
            starting at an IDR carrying its SPS/PPS), checked by `frame_packets` in the worker.
        outputs: per payload, which of its decoded frames is the one wanted (0 intra-only).
        which: per image of the batch (row-major over shape[:-3]), its payload's number.
    """

    shape: tuple[int, ...]
    payloads: tuple[bytes, ...]
    outputs: tuple[int, ...]
    which: np.ndarray

    @property
    def nbytes(self) -> int:
        """Bytes this key carries (payloads and their numbers)."""
        return sum(len(p) for p in self.payloads) + int(self.which.nbytes)

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, rows: slice) -> CompressedImages:
        """Only `[:0]`: the empty batch a Loader(on_corrupt="skip") gives when every sample of a
        batch is damaged (`pi_loader.samples._corrupt`)."""
        if rows != slice(None, 0):
            raise TypeError(f"CompressedImages takes only [:0], got {rows!r}")
        return CompressedImages((0, *self.shape[1:]), (), (), self.which[:0])

    def frames(self) -> list[tuple[bytes, int]]:
        """(payload, output index) per image of the batch, in row-major order."""
        return [(self.payloads[w], self.outputs[w]) for w in self.which.tolist()]


def compressed_samples(dataset: Any, indices: np.ndarray) -> dict[str, Any]:
    """The batch `dataset.samples(indices)` gives, its image keys as `CompressedImages` (run by
    a Loader's workers with decoder="nvdec"; nothing is decoded).

    Raises:
        ChunkPacketError: a chunk not fit for the GPU decoder (in the worker, before any byte
            leaves it).
        CorruptDataError, PiLoaderError: as `Dataset.samples` (a chunk's CRC, a locator).
    """
    other = _compressing(dataset)
    batch: dict[str, Any] = other.samples(indices)
    skipped = other.__dict__.get("_corrupt_skipped", 0)
    if skipped:  # counted on the Dataset the Loader reads its counters of (on_corrupt="skip")
        dataset._corrupt_skipped += skipped
        other._corrupt_skipped = 0
    return batch


_COPIES: dict[int, tuple[Any, Any]] = {}  # id(dataset) -> (dataset, its compressing copy), per process


def _compressing(dataset: Any) -> Any:
    held = _COPIES.get(id(dataset))
    if held is not None and held[0] is dataset:
        return held[1]
    gather = copy.copy(dataset._gather)
    gather._images = types.MethodType(_compressed_images, gather)
    other = copy.copy(dataset)
    other._gather = gather
    if len(_COPIES) >= 8:  # a Loader has one Dataset; tests make many
        _COPIES.clear()
    _COPIES[id(dataset)] = (dataset, other)
    return other


def _compressed_images(
    gather: Any, episodes: np.ndarray, frames: np.ndarray, history: bool, allocate: Any
) -> dict[str, CompressedImages]:
    """`SampleGather._images` for the GPU: per camera, the frames' access units, not pixels."""
    del allocate  # nothing is written on this side
    count, slots, cameras = frames.shape
    video = gather._video
    out: dict[str, CompressedImages] = {}
    for c in range(cameras):
        camera = gather._cameras[c]
        seen: dict[tuple[int, int], int] = {}
        payloads: list[bytes] = []
        outputs: list[int] = []
        which = np.empty(count * slots, np.int32)
        size: tuple[int, int] | None = None
        for position, (e, f) in enumerate(
            zip(np.repeat(episodes, slots).tolist(), frames[:, :, c].reshape(-1).tolist(), strict=True)
        ):
            number = seen.get((e, f))
            if number is None:
                chunk = video._chunk(e, c, f)  # read, row and CRC checked; not decoded
                frame_size = (int(chunk.height), int(chunk.width))
                if size is None:
                    size = frame_size
                elif frame_size != size:
                    raise PiLoaderError(
                        f"camera {camera!r}: episode {gather._episode_ids[e]} has {frame_size[1]}x"
                        f"{frame_size[0]} frames, others in the batch {size[1]}x{size[0]} (width x "
                        "height); the GPU path batches one frame size per camera"
                    )
                data = chunk.decoder.data
                packets = frame_packets(
                    data,
                    f - int(chunk.first_frame),
                    frame_count=int(chunk.frame_count),
                    units=chunk.decoder.access_units,
                )
                number = seen[(e, f)] = len(payloads)
                payloads.append(b"".join(bytes(p) for p in packets.payloads(data)))
                outputs.append(packets.output_index)
            which[position] = number
        assert size is not None
        shape = (count, *((slots,) if history else ()), *size, 3)
        out[_IMAGE_KEY_PREFIX + camera] = CompressedImages(shape, tuple(payloads), tuple(outputs), which)
    return out


@dataclass(frozen=True, slots=True)
class LoaderDecoding:
    """How a Loader's batches are decoded: `kind` "cpu" (its workers decode: `build` None) or
    "nvdec" (`build` runs in the workers, `finish` in the consumer).

    Example:
        >>> loader_decoding("cpu", ds, batch_size=32).build is None
        True
    """

    kind: str
    decoder: FrameDecoder | None = None

    @property
    def build(self) -> Any:
        """The workers' batch builder (`compressed_samples`), or None for the CPU path."""
        return None if self.decoder is None else compressed_samples

    def finish(self, batch: dict[str, Any]) -> dict[str, Any]:
        """`batch` with each `CompressedImages` decoded by the decoder into a uint8 tensor of its
        shape on the decoder's device, keys in the same order."""
        if self.decoder is None:
            return batch
        out: dict[str, Any] = {}
        for key, value in batch.items():
            out[key] = _decode(self.decoder, value) if isinstance(value, CompressedImages) else value
        return out


def _decode(decoder: FrameDecoder, images: CompressedImages) -> Any:
    import torch

    tensor = torch.empty(images.shape, dtype=torch.uint8, device=decoder.device)
    height, width = images.shape[-3], images.shape[-2]
    if images.which.size:
        flat = tensor.view(-1, height, width, 3)
        decoder.decode(images.frames(), width=width, height=height, out=flat)
    return tensor


def loader_decoding(
    decoder: str | DecoderOptions | FrameDecoder, dataset: Any, *, batch_size: int
) -> LoaderDecoding:
    """The decoding a Loader of `dataset` runs with, checked at its construction.

    Args:
        decoder: "cpu", "auto", "nvdec", DecoderOptions, or a decoder made already (an
            `NvdecDecoder`, e.g. on another device).

    Raises:
        GpuDecoderUnavailableError: "nvdec" on a host that cannot run it.
        ValueError: "nvdec" with what the GPU path does not do: a Mixture, or a SampleSpec with
            crop or resize (the CPU path's Pillow resize has no bit-equal GPU twin).
        TypeError: a decoder that is none of these.

    Example:
        >>> loader_decoding("auto", ds, batch_size=32).kind
        'cpu'
    """
    made: FrameDecoder | None = None
    if isinstance(decoder, str | DecoderOptions):
        kind = loader_decoder(decoder, batch_size=batch_size, image_shapes=dataset.image_shapes())
    elif isinstance(decoder, FrameDecoder):
        kind, made = "nvdec", decoder
    else:
        raise TypeError(
            "decoder must be one of ('cpu', 'nvdec', 'auto'), a DecoderOptions or a decoder with "
            f"decode() and device (NvdecDecoder), got {type(decoder).__name__}"
        )
    if kind == "cpu":
        return LoaderDecoding("cpu")
    spec = getattr(dataset, "spec", None)
    if spec is None or not hasattr(dataset, "_gather"):
        raise ValueError(
            f'decoder="nvdec" takes a Dataset, got a {type(dataset).__name__}: a Mixture decodes '
            'on the CPU (decoder="cpu")'
        )
    if spec.crop is not None or spec.resize is not None:
        raise ValueError(
            f'decoder="nvdec" hands out frames as stored; this SampleSpec has crop={spec.crop} '
            f'resize={spec.resize}: crop/resize the decoded tensor on the GPU, or use decoder="cpu"'
        )
    if made is None:
        from pi_loader.decoding._nvdec import NvdecDecoder

        made = NvdecDecoder(decoder if isinstance(decoder, DecoderOptions) else DecoderOptions(kind="nvdec"))
    return LoaderDecoding("nvdec", made)
