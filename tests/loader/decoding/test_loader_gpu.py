"""The Loader's GPU path (decoder="nvdec"): workers send the compressed frames, the consumer
decodes them. No GPU runs here, so the consumer's decoder is `CpuStandInForNvdec`, a test double
that decodes the very bytes NvdecDecoder would be fed with PyAV: it proves the wiring (same
frames, same order, same other arrays as the CPU path; compressed bytes only in flight; hostile
chunks refused in the worker, before any decoder). `test_nvdec_loader_on_a_gpu` runs the real
NvdecDecoder where a GPU is, and is skipped here naming what is missing."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from pi_format.video import ChunkDecoder, VideoChunk, encode_chunks
from pi_format.video.reader import access_unit_bounds
from pi_loader import CorruptDataError, Dataset, Loader, SampleSpec
from pi_loader.decoding import (
    ChunkPacketError,
    CompressedImages,
    compressed_samples,
    frame_packets,
    gpu_unavailable_reason,
)

from tests.fixtures import lake_factory
from tests.fixtures.lake_factory import FakeLake, write_lake
from tests.loader.delivery.test_on_corrupt import _flip_video_chunk

NO_GPU = gpu_unavailable_reason()


class CpuStandInForNvdec:
    """TEST DOUBLE for NvdecDecoder (no GPU on this host): the same `decode` contract, fed the
    same bytes, checked by the same `frame_packets`, decoded by PyAV into CPU tensors."""

    def __init__(self) -> None:
        self.calls = 0
        self.frames = 0

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")

    def decode(
        self,
        frames: Sequence[tuple[bytes, int]],
        *,
        width: int,
        height: int,
        frame_count: int | None = None,
        out: Any = None,
    ) -> Any:
        self.calls += 1
        for row, (data, index) in enumerate(frames):
            packets = frame_packets(data, index, frame_count=frame_count)  # as NvdecDecoder does
            rgb = ChunkDecoder(data).rgb(packets.output_index)
            assert rgb.shape == (height, width, 3)
            out[row].copy_(torch.from_numpy(rgb))
            self.frames += 1
        return out


def _batches(loader: Loader, count: int) -> list[dict[str, np.ndarray]]:
    out = []
    for batch in loader:
        out.append({k: v.numpy() if isinstance(v, torch.Tensor) else np.array(v) for k, v in batch.items()})
        if len(out) == count:
            break
    loader.close()
    return out


def _assert_same(got: list[dict[str, np.ndarray]], want: list[dict[str, np.ndarray]]) -> None:
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        assert list(a) == list(b)
        for key in a:
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("history", [0, 2])
def test_the_gpu_path_gives_the_cpu_paths_batches_in_the_same_order(
    loader_lake: FakeLake, workers: int, history: int
) -> None:
    spec = SampleSpec(cameras=("front", "wrist"), action_horizon=3, frame_history=history)
    ds = Dataset(loader_lake.layout, spec=spec, seed=11)
    want = _batches(Loader(ds, batch_size=6, num_workers=workers), 4)
    stand_in = CpuStandInForNvdec()
    loader = Loader(ds, batch_size=6, num_workers=workers, decoder=stand_in)
    assert loader.decoder == "nvdec"
    raw = next(iter(loader))
    assert all(isinstance(raw[key], torch.Tensor) for key in raw if key.startswith("observation.images."))
    got = _batches(Loader(ds, batch_size=6, num_workers=workers, decoder=stand_in), 4)
    _assert_same(got, want)  # images, ids, steps, actions: the same, in the same order
    assert [b["episode_id"].tolist() for b in got] == [b["episode_id"].tolist() for b in want]
    if workers == 0:
        assert stand_in.frames >= 4 * 6 * 2 * (history + 1)


def test_workers_send_only_the_frames_access_units_never_pixels(loader_lake: FakeLake) -> None:
    ds = Dataset(loader_lake.layout, spec=SampleSpec(cameras=("front", "wrist"), action_horizon=3), seed=3)
    shapes = ds.image_shapes()
    for start in range(0, len(ds) - 8, 8):
        indices = np.arange(start, start + 8)
        batch = compressed_samples(ds, indices)
        cpu = ds.samples(indices)
        assert list(batch) == list(cpu)
        for key, value in batch.items():
            if key.startswith("observation.images."):
                assert isinstance(value, CompressedImages)
                assert value.shape == cpu[key].shape == (8, *shapes[key])
                # one access unit per frame (intra-only): far less than the pixels, bounded by
                # the batch, not by what was read before
                assert value.nbytes < cpu[key].nbytes / 4
                assert len(value.payloads) <= 8
                for payload, output in zip(value.payloads, value.outputs, strict=True):
                    # the units from the keyframe up to the frame, nothing after: not the chunk
                    units = access_unit_bounds(payload)
                    assert units is not None and len(units) == output + 1 and units[0][2]
            else:
                np.testing.assert_array_equal(value, cpu[key], err_msg=key)


def test_nvdec_refuses_what_it_does_not_do_at_construction(loader_lake: FakeLake) -> None:
    stand_in = CpuStandInForNvdec()
    spec = SampleSpec(cameras=("front",), resize=(16, 16), action_horizon=3)
    resized = Dataset(loader_lake.layout, spec=spec, seed=1)
    with pytest.raises(ValueError, match="crop/resize the decoded tensor on the GPU"):
        Loader(resized, batch_size=4, num_workers=0, decoder=stand_in)
    with pytest.raises(TypeError, match="decoder must be one of"):
        Loader(resized, batch_size=4, num_workers=0, decoder=object())  # type: ignore[arg-type]


def test_a_damaged_chunk_is_refused_by_its_crc_before_the_decoder(tmp_path: Path) -> None:
    lake = write_lake(
        tmp_path / "lake", episodes=3, steps=9, cameras=("front",), size=(32, 32), garbage_attempt=False
    )
    _flip_video_chunk(Path(lake.layout.root), 1)
    ds = Dataset(lake.layout.root, spec=SampleSpec(action_horizon=2), seed=0)
    stand_in = CpuStandInForNvdec()
    with pytest.raises(CorruptDataError, match="video"):
        _batches(Loader(ds, batch_size=27, num_workers=0, decoder=stand_in), 1)
    assert stand_in.calls == 0  # the whole batch was refused before any decode
    skipping = Loader(ds, batch_size=27, num_workers=0, decoder=stand_in, on_corrupt="skip")
    (kept,) = _batches(skipping, 1)
    assert 0 < len(kept["step"]) < 27 and skipping.stats().corrupt_skipped == 27 - len(kept["step"])


def _hostile(kind: str, chunk: VideoChunk, rng: np.random.Generator) -> bytes:
    data = chunk.data
    if kind == "random":
        return rng.integers(0, 256, len(data), dtype=np.uint8).tobytes()
    if kind == "no-idr-first":  # the chunk's second half only: starts with a frame needing others
        return data[len(data) // 2 :]
    if kind == "cut":  # the first unit alone: fewer units than the row's frame_count
        return data[: data.find(b"\x00\x00\x00\x01", 8)]
    return b"\x00\x00\x01\x09\xf0" * 64  # "delimiters": access unit delimiters, no picture


@pytest.mark.parametrize("kind", ["random", "no-idr-first", "cut", "delimiters"])
def test_a_hostile_chunk_with_a_good_crc_is_refused_in_the_worker_and_its_neighbours_decode(
    tmp_path: Path, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(len(kind))
    made = {"n": 0}

    def hostile_second_chunk(*args: Any, **kwargs: Any) -> list[VideoChunk]:
        chunks = encode_chunks(*args, **kwargs)
        made["n"] += 1
        if made["n"] == 2:  # the second episode's first chunk: written, CRC'd as it is
            c = chunks[0]
            chunks[0] = dataclasses.replace(c, data=_hostile(kind, c, rng))
        return chunks

    monkeypatch.setattr(lake_factory, "encode_chunks", hostile_second_chunk)
    lake = write_lake(
        tmp_path / "lake", episodes=3, steps=9, cameras=("front",), size=(32, 32), garbage_attempt=False
    )
    ds = Dataset(lake.layout.root, spec=SampleSpec(action_horizon=2), seed=0)
    # flat sample i is step i % 9 of episode i // 9: 9 is the second episode's first frame, in
    # its hostile first chunk
    bad, good = [9], [*range(9), *range(18, 27)]
    with pytest.raises(ChunkPacketError, match="video chunk"):
        compressed_samples(ds, np.array(bad[:1]))
    stand_in = CpuStandInForNvdec()
    loader = Loader(ds, batch_size=len(ds), num_workers=2, decoder=stand_in)
    with pytest.raises(ChunkPacketError):
        _batches(loader, 1)
    assert stand_in.calls == 0
    batch = compressed_samples(ds, np.array(good))
    assert lake.episode_ids[1] not in batch["episode_id"].tolist()
    decoded = Loader(ds, batch_size=4, num_workers=0, decoder=stand_in)._decoding.finish(batch)
    np.testing.assert_array_equal(
        decoded["observation.images.front"].numpy(), ds.samples(good)["observation.images.front"]
    )


@pytest.mark.skipif(NO_GPU is not None, reason=f"needs an NVIDIA GPU with NVDEC: {NO_GPU}")
def test_nvdec_loader_on_a_gpu(loader_lake: FakeLake) -> None:  # pragma: no cover - GPU hosts
    ds = Dataset(loader_lake.layout, spec=SampleSpec(cameras=("front", "wrist"), action_horizon=3), seed=11)
    want = _batches(Loader(ds, batch_size=6, num_workers=2), 3)
    loader = Loader(ds, batch_size=6, num_workers=2, decoder="nvdec")
    got = []
    for batch in loader:
        image: Any = batch["observation.images.front"]
        assert image.is_cuda and image.dtype == torch.uint8
        got.append({k: v.cpu().numpy() if isinstance(v, torch.Tensor) else v for k, v in batch.items()})
        if len(got) == 3:
            break
    loader.close()
    for a, b in zip(got, want, strict=True):
        assert list(a) == list(b)
        for key in a:
            if key.startswith("observation.images."):  # NVDEC's RGB is within a few levels of swscale
                diff = np.abs(a[key].astype(np.int16) - b[key].astype(np.int16))
                assert diff.mean() < 4, key
            else:
                np.testing.assert_array_equal(a[key], b[key], err_msg=key)
