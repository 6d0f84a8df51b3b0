"""The same batches through numpy, torch, Grain and JAX, and pi_loader stays light on import."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from pi_loader import Dataset, Loader, SampleSpec, ShardSpec
from pi_loader.adapters import OrderedSource, grain_dataset, jax_batches, numpy_batches, torch_dataloader

from tests.fixtures.lake_factory import FakeLake

SPEC = SampleSpec(cameras=("front", "wrist"), frame_history=1, action_horizon=3, normalize="mean_std")
KW = {"batch_size": 4, "shard": ShardSpec(1, 3), "block_size": 2}


def _loader(lake: FakeLake) -> Loader:
    return Loader(Dataset(lake.layout, spec=SPEC, seed=9), **KW)  # type: ignore[arg-type]


def _assert_same(reference: list[dict[str, np.ndarray]], other: list[dict[str, object]]) -> None:
    assert len(reference) == len(other) > 2
    for want, got in zip(reference, other, strict=True):
        assert set(want) == set(got)
        for key, value in want.items():
            mine = got[key]
            array = np.asarray(mine.numpy() if hasattr(mine, "numpy") else mine)
            np.testing.assert_array_equal(array, value, err_msg=key)
            if value.dtype.kind not in "US":
                assert array.dtype == value.dtype, key


def test_numpy_torch_grain_and_jax_give_the_same_batches(loader_lake: FakeLake) -> None:
    reference = list(numpy_batches(_loader(loader_lake)))
    assert reference[0]["observation.images.front"].shape == (4, 2, 32, 48, 3)

    pytest.importorskip("torch")
    _assert_same(reference, list(torch_dataloader(_loader(loader_lake))))

    pytest.importorskip("grain")
    ds = Dataset(loader_lake.layout, spec=SPEC, seed=9)
    batches = grain_dataset(ds, batch_size=4, epoch=0, shard=ShardSpec(1, 3), block_size=2)
    _assert_same(reference, [batches[i] for i in range(len(batches))])
    _assert_same(reference, list(batches.to_iter_dataset()))
    source = OrderedSource(ds, epoch=0, shard=ShardSpec(1, 3), block_size=2)
    assert repr(source) == repr(OrderedSource(ds, epoch=0, shard=ShardSpec(1, 3), block_size=2))

    jax = pytest.importorskip("jax")
    plain = list(jax_batches(_loader(loader_lake)))
    assert isinstance(plain[0]["action"], jax.Array)
    _assert_same(reference, [{k: np.asarray(v) for k, v in b.items()} for b in plain])
    mesh = jax.make_mesh((jax.device_count(),), ("data",))
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))
    loader = Loader(Dataset(loader_lake.layout, spec=SPEC, seed=9), drop_last=True, **KW)  # type: ignore[arg-type]
    placed = list(jax_batches(loader, sharding))
    assert placed[0]["action"].sharding == sharding
    _assert_same(reference[: len(placed)], [{k: np.asarray(v) for k, v in b.items()} for b in placed])


def test_pin_memory_needs_cuda(loader_lake: FakeLake) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        batch = next(iter(torch_dataloader(_loader(loader_lake), pin_memory=True)))
        assert batch["action"].is_pinned()
    else:
        with pytest.raises(ValueError, match="pin_memory=True needs a CUDA device"):
            torch_dataloader(_loader(loader_lake), pin_memory=True)


def test_import_stays_light() -> None:
    code = (
        "import sys, pi_loader, pi_loader.adapters; heavy = [m for m in ('torch', 'jax', 'grain', 'pyflink', "
        "'confluent_kafka', 'chdb', 'clickhouse_connect', 'PIL') if m in sys.modules]; print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")  # the worker touches no JAX
def test_torch_iterable_refuses_torch_workers(loader_lake: FakeLake) -> None:
    """In torch's workers each would iterate its own copy of the Loader: every batch once per
    worker, with epochs that never follow the main process."""
    torch = pytest.importorskip("torch")
    from pi_loader import PiLoaderError
    from pi_loader.adapters import torch_iterable

    batches = torch_iterable(_loader(loader_lake))
    workers = torch.utils.data.DataLoader(
        batches, batch_size=None, num_workers=1, multiprocessing_context="fork"
    )
    with pytest.raises(PiLoaderError, match="must be iterated in the main process"):
        next(iter(workers))
    assert len(list(torch.utils.data.DataLoader(batches, batch_size=None, num_workers=0))) > 2
