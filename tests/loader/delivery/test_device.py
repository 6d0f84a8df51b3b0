"""Device feeds (pi_loader.delivery._device): batches staged ahead on a thread keep their
order, carry the loader's position of the batch handed out (not of those fetched ahead), and
surface a failure. The CUDA path (pinned staging, side stream) runs on a GPU host in
benchmarks/gpu_host; here the same feeds run on the CPU device."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import numpy as np
import pytest
from pi_loader import Dataset, Loader, PiLoaderError, SampleSpec, ShardSpec
from pi_loader.adapters import FedBatch, JaxFeed, TorchFeed, jax_batches, torch_device_batches

from tests.fixtures.lake_factory import FakeLake


def _loader(lake: FakeLake) -> Loader:
    ds = Dataset(lake.layout, spec=SampleSpec(cameras=("front",), action_horizon=3), seed=1)
    return Loader(ds, batch_size=4, shard=ShardSpec(0, 1), num_workers=0)


def test_torch_feed_keeps_order_and_each_batch_carries_its_own_position(loader_lake: FakeLake) -> None:
    reference_loader = _loader(loader_lake)
    expected = []
    for batch in reference_loader:
        expected.append((batch, reference_loader.get_state()))
    loader = _loader(loader_lake)
    with TorchFeed(loader, device="cpu", depth=3) as feed:
        got: list[FedBatch] = list(feed)
    assert len(got) == len(expected)
    for fed, (batch, state) in zip(got, expected, strict=True):
        assert fed.state == state  # the position after this batch, though the feed ran ahead
        assert set(fed.inputs) == {k for k, v in batch.items() if v.dtype.kind not in "USO"}
        for key, tensor in fed.inputs.items():
            assert np.array_equal(tensor.numpy(), batch[key]), key
            assert tensor.dtype.itemsize == batch[key].dtype.itemsize  # uint8 stays uint8
        assert list(fed.host["episode_id"]) == list(batch["episode_id"])
        assert fed.data_wait_s >= 0 and fed.copy_wait_s >= 0


def test_keys_limit_what_is_copied(loader_lake: FakeLake) -> None:
    with TorchFeed(_loader(loader_lake), device="cpu", keys=("action", "observation.images.front")) as feed:
        fed = next(feed)
    assert set(fed.inputs) == {"action", "observation.images.front"}
    assert "episode_id" in fed.host


def test_jax_feed_and_adapters_yield_the_loader_batches(loader_lake: FakeLake) -> None:
    jax = pytest.importorskip("jax")
    expected = list(_loader(loader_lake))
    with JaxFeed(_loader(loader_lake), depth=2) as feed:
        got = list(feed)
    assert [np.asarray(f.inputs["action"]).tolist() for f in got] == [b["action"].tolist() for b in expected]
    assert all(isinstance(f.inputs["action"], jax.Array) for f in got)
    adapted = list(jax_batches(_loader(loader_lake), prefetch=3))
    assert [list(b["episode_id"]) for b in adapted] == [list(b["episode_id"]) for b in expected]
    torch_adapted = list(torch_device_batches(_loader(loader_lake), "cpu"))
    assert [b["action"].numpy().tolist() for b in torch_adapted] == [b["action"].tolist() for b in expected]


def _failing() -> Iterator[dict[str, np.ndarray]]:
    yield {"action": np.zeros((2, 3), np.float32)}
    raise PiLoaderError("the source broke after one batch")


def test_a_failure_on_the_feed_thread_is_raised_to_the_consumer() -> None:
    feed = TorchFeed(_failing(), device="cpu")
    assert np.array_equal(next(feed).inputs["action"].numpy(), np.zeros((2, 3)))
    with pytest.raises(PiLoaderError, match="broke after one batch"):
        next(feed)
    with pytest.raises(PiLoaderError, match="broke after one batch"):
        next(feed)  # and stays raised
    feed.close()


def test_close_stops_a_feed_that_is_ahead() -> None:
    def endless() -> Iterator[dict[str, np.ndarray]]:
        while True:
            yield {"x": np.ones(4, np.uint8)}

    feed = TorchFeed(endless(), device="cpu", depth=2)
    next(feed)
    feed.close()
    assert not any(t.name == "pi_loader-device-feed" for t in threading.enumerate())


def test_bad_arguments_are_clear() -> None:
    with pytest.raises(ValueError, match="depth must be an int >= 1"):
        TorchFeed([], device="cpu", depth=0)
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA device but this torch sees none"):
            TorchFeed([], device="cuda")
