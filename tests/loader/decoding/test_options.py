"""Choosing the decoder: DecoderOptions, resolve_decoder and the Loader's `decoder=` argument;
"nvdec" refused clearly where the host cannot run it, the CPU path unchanged by "cpu"/"auto"."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from pi_loader import Dataset, Loader, SampleSpec
from pi_loader.decoding import (
    DecoderOptions,
    GpuDecoderUnavailableError,
    NvdecDecoder,
    _options,
    gpu_unavailable_reason,
    loader_decoder,
    resolve_decoder,
)

from tests.fixtures.lake_factory import FakeLake

NO_GPU = gpu_unavailable_reason()
SHAPES = {"observation.images.front": (224, 224, 3)}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"kind": "gpu"}, r"decoder kind must be one of \('cpu', 'nvdec', 'auto'\), got 'gpu'"),
        ({"kind": "nvdec", "device": -1}, r"device must be a CUDA device ordinal \(an int >= 0\), got -1"),
        ({"device": True}, "device must be a CUDA device ordinal"),
        ({"device": "0"}, "device must be a CUDA device ordinal"),
        ({"max_chunk_bytes": 0}, "max_chunk_bytes must be an int >= 1, got 0"),
        ({"max_chunk_bytes": 1.5}, "max_chunk_bytes must be an int >= 1"),
    ],
)
def test_bad_options_are_refused_at_construction(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        DecoderOptions(**kwargs)  # type: ignore[arg-type]


def test_cpu_is_the_default_and_auto_stays_on_the_cpu_until_a_measurement_says_otherwise(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert DecoderOptions().kind == "cpu"
    for decoder in ("cpu", "auto", DecoderOptions(kind="auto", device=0)):
        assert resolve_decoder(decoder, batch_size=32, frame_height=224).kind == "cpu"
    # a measured win counts only where the GPU can run: without one, "auto" is still the CPU
    monkeypatch.setattr(_options, "GPU_WINS", frozenset({(32, 224)}))
    monkeypatch.setattr(_options, "gpu_unavailable_reason", lambda device=0: "no GPU (test)")
    assert resolve_decoder("auto", batch_size=32, frame_height=224).kind == "cpu"
    monkeypatch.setattr(_options, "gpu_unavailable_reason", lambda device=0: None)
    assert resolve_decoder("auto", batch_size=32, frame_height=224).kind == "nvdec"
    assert resolve_decoder("auto", batch_size=128, frame_height=224).kind == "cpu"  # not measured to win


def test_a_decoder_that_is_not_a_kind_is_a_type_error() -> None:
    with pytest.raises(TypeError, match=r"decoder must be one of .* or a DecoderOptions, got int"):
        resolve_decoder(3, batch_size=1, frame_height=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="got 'GPU'"):
        resolve_decoder("GPU", batch_size=1, frame_height=1)


@pytest.mark.skipif(NO_GPU is None, reason="this host can decode on the GPU: the refusal is not reachable")
def test_nvdec_without_a_gpu_is_refused_with_what_is_missing_and_what_to_do() -> None:
    for make in (
        lambda: resolve_decoder("nvdec", batch_size=32, frame_height=224),
        lambda: loader_decoder("nvdec", batch_size=32, image_shapes=SHAPES),
        lambda: NvdecDecoder(),
        lambda: NvdecDecoder(DecoderOptions(kind="auto")),
    ):
        with pytest.raises(GpuDecoderUnavailableError, match="cannot run on this host") as caught:
            make()
        text = str(caught.value)
        assert NO_GPU is not None and NO_GPU in text  # what is missing
        assert "pip install 'pi-lake[gpu]'" in text and 'decoder="cpu"' in text  # what to do


def test_the_missing_library_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a host whose torch sees a GPU but PyNvVideoCodec is not installed, the reason names the
    library (torch's CUDA check is stood in for here when the host has no GPU)."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setitem(sys.modules, "PyNvVideoCodec", None)  # import fails as if not installed
    assert "PyNvVideoCodec does not import" in str(gpu_unavailable_reason(0))
    assert gpu_unavailable_reason(1) == "CUDA device 1 does not exist (this host has 1)"
    with pytest.raises(GpuDecoderUnavailableError, match="PyNvVideoCodec does not import"):
        resolve_decoder("nvdec", batch_size=32, frame_height=224)


def test_nvdec_where_the_gpu_can_run_is_the_loaders_kind(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_options, "gpu_unavailable_reason", lambda device=0: None)
    assert loader_decoder("nvdec", batch_size=32, image_shapes=SHAPES) == "nvdec"
    with pytest.raises(ValueError, match='needs DecoderOptions\\(kind="nvdec"\\)'):
        NvdecDecoder(DecoderOptions(kind="cpu"))


def _batches(loader: Loader, count: int) -> list[dict[str, np.ndarray]]:
    out = []
    for batch in loader:
        out.append({k: np.array(v) for k, v in batch.items()})
        if len(out) == count:
            break
    return out


def test_the_cpu_path_is_unchanged_by_cpu_and_auto(loader_lake: FakeLake) -> None:
    spec = SampleSpec(cameras=("front", "wrist"), action_horizon=3)
    ds = Dataset(loader_lake.layout, spec=spec, seed=7)
    fingerprint = ds.fingerprint
    default = _batches(Loader(ds, batch_size=4, num_workers=0), 3)
    for decoder in ("cpu", "auto", DecoderOptions(kind="auto")):
        loader = Loader(ds, batch_size=4, num_workers=0, decoder=decoder)
        assert loader.decoder == "cpu"
        got = _batches(loader, 3)
        assert [sorted(b) for b in got] == [sorted(b) for b in default]
        for a, b in zip(got, default, strict=True):
            for key in a:
                np.testing.assert_array_equal(a[key], b[key], err_msg=key)
    assert ds.fingerprint == fingerprint
    assert any(key.startswith("observation.images.") for key in default[0])


def test_the_loader_refuses_a_bad_or_unrunnable_decoder_at_construction(loader_lake: FakeLake) -> None:
    ds = Dataset(loader_lake.layout, spec=SampleSpec(cameras=("front",), action_horizon=3), seed=7)
    with pytest.raises(ValueError, match="decoder kind must be one of"):
        Loader(ds, batch_size=4, num_workers=0, decoder="cuda")
    with pytest.raises(TypeError, match="decoder must be one of"):
        Loader(ds, batch_size=4, num_workers=0, decoder=None)  # type: ignore[arg-type]
    if NO_GPU is not None:
        with pytest.raises(GpuDecoderUnavailableError):
            Loader(ds, batch_size=4, num_workers=0, decoder="nvdec")
