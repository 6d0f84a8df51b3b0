"""Adapters from pi_loader to training frameworks: numpy, torch, JAX and Grain.

Each framework is imported inside the function that needs it, so `import pi_loader` stays light
(`pi-lake[loader]` pulls none of them). Every adapter keeps pi_loader's order: batches are those
of `Loader` (or, for Grain, the samples of `Loader.epoch_indices` in order), whatever the
framework's own worker count.

Epochs and hosts: `Loader` computes every epoch's order in the main process and its workers
only build the batches they are sent, so `Loader.set_epoch` (and the epoch after epoch it
moves on to by itself) reaches them; a `Dataset` handed to a torch `DataLoader` directly follows
`Dataset.set_epoch` in its workers too, persistent ones included. Before training, call
`pi_loader.agree(loader)` on every host (or open with `Dataset.shared`): it raises
`HostsDisagreeError` when the hosts opened different data.

Example:
    >>> from pi_loader.adapters import jax_batches, torch_dataloader
    >>> for batch in jax_batches(loader, sharding):   # jax.Array leaves, placed with `sharding`
    ...     state = train_step(state, batch)
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from pi_loader._errors import PiLoaderError
from pi_loader.delivery._device import DEFAULT_DEPTH, DeviceFeed, FedBatch, JaxFeed, TorchFeed
from pi_loader.delivery._loader import Loader
from pi_loader.order._order import ShardSpec, block_order, check_seed, sample_order, shard_order
from pi_loader.samples._dataset import Dataset

__all__ = [
    "DeviceFeed",
    "FedBatch",
    "JaxFeed",
    "OrderedSource",
    "TorchFeed",
    "grain_dataset",
    "jax_batches",
    "numpy_batches",
    "torch_dataloader",
    "torch_device_batches",
    "torch_iterable",
]


def numpy_batches(loader: Loader) -> Iterator[dict[str, np.ndarray]]:
    """The loader's batches as they are: dicts of numpy arrays ("episode_id" a str array).

    Example:
        >>> next(numpy_batches(loader))["action"].shape  # (batch, action_horizon, A)
    """
    yield from loader


def _to_torch(batch: dict[str, np.ndarray], pin_memory: bool) -> dict[str, Any]:
    import torch

    out: dict[str, Any] = {}
    for key, value in batch.items():
        if value.dtype.kind in "US":  # strings stay a list, as torch's default collate does
            out[key] = value.tolist()
            continue
        tensor = torch.from_numpy(np.ascontiguousarray(value))
        out[key] = tensor.pin_memory() if pin_memory else tensor
    return out


def torch_iterable(loader: Loader, *, pin_memory: bool = False) -> Any:
    """A torch `IterableDataset` over the loader's batches (dicts of tensors; ids as lists).

    The loader does its own reading in worker processes: wrap it in a DataLoader with
    `batch_size=None, num_workers=0` (what `torch_dataloader` does). `pin_memory=True` copies
    tensors into page-locked memory for faster host-to-GPU transfers (needs CUDA).

    Example:
        >>> for batch in torch_iterable(loader):
        ...     loss = model(batch["observation.images.front"].cuda(non_blocking=True))
    """
    try:
        import torch.utils.data
    except ImportError as err:
        raise ImportError("torch_iterable needs torch: pip install 'pi-lake[torch]'") from err
    if pin_memory and not torch.cuda.is_available():
        raise ValueError("pin_memory=True needs a CUDA device; this torch sees none")

    class _Batches(torch.utils.data.IterableDataset):
        def __iter__(self) -> Iterator[dict[str, Any]]:
            if torch.utils.data.get_worker_info() is not None:
                # Each torch worker would iterate its own copy of the loader: every batch once
                # per worker, and the copies' epochs never follow the main process's.
                raise PiLoaderError(
                    "torch_iterable(loader) must be iterated in the main process: use "
                    "DataLoader(..., batch_size=None, num_workers=0) (what torch_dataloader does) "
                    "and give the Loader itself workers (Loader(ds, num_workers=...)); for torch's "
                    "own workers, pass the Dataset to the DataLoader (Dataset.set_epoch reaches them)"
                )
            for batch in loader:
                yield _to_torch(batch, pin_memory)

    return _Batches()


def torch_dataloader(loader: Loader, *, pin_memory: bool = False) -> Any:
    """A `torch.utils.data.DataLoader` yielding the loader's batches as tensors, in its order.

    Example:
        >>> for batch in torch_dataloader(loader): ...
    """
    import torch.utils.data

    return torch.utils.data.DataLoader(
        torch_iterable(loader, pin_memory=pin_memory), batch_size=None, num_workers=0
    )


def jax_batches(
    loader: Loader | Iterable[dict[str, np.ndarray]], sharding: Any = None, *, prefetch: int = DEFAULT_DEPTH
) -> Iterator[dict[str, Any]]:
    """The loader's batches with numeric leaves as `jax.Array`s, `prefetch` batches put on the
    device ahead of the one yielded (double-buffered by default; `JaxFeed`).

    With `sharding` (a `jax.sharding.Sharding`), each host's batch is this process's part of a
    global batch (`jax.make_array_from_process_local_data`): give every host its own
    `ShardSpec.from_jax()` shard. Without it, arrays go to the default device. String leaves
    ("episode_id") stay numpy.

    Example:
        >>> mesh = jax.make_mesh((jax.device_count(),), ("data",))
        >>> sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))
        >>> batch = next(jax_batches(loader, sharding))
    """
    with JaxFeed(loader, sharding=sharding, depth=prefetch) as feed:
        for fed in feed:
            yield {key: fed.inputs.get(key, value) for key, value in fed.host.items()}


def torch_device_batches(
    loader: Loader | Iterable[dict[str, np.ndarray]], device: Any = "cuda", *, prefetch: int = DEFAULT_DEPTH
) -> Iterator[dict[str, Any]]:
    """The loader's batches as torch tensors on `device`, each copied from reused page-locked
    buffers on a side stream while the previous step runs (`TorchFeed`). uint8 frames cross the
    bus as uint8: convert and normalize on the device. Ids stay numpy.

    Example:
        >>> for batch in torch_device_batches(loader, "cuda"):
        ...     images = batch["observation.images.front"].permute(0, 3, 1, 2).float() / 255
    """
    with TorchFeed(loader, device=device, depth=prefetch) as feed:
        for fed in feed:
            yield {key: fed.inputs.get(key, value) for key, value in fed.host.items()}


class OrderedSource:
    """A Grain `RandomAccessDataSource`: record i is sample i of one shard's order for one epoch.

    Thread-safe, deterministic and picklable (it holds the Dataset and the order). Use it with
    `grain.MapDataset.source(...)` and batch there; do not add Grain shuffling or sharding, the
    order is already pi_loader's (decision 5).

    Example:
        >>> source = OrderedSource(ds, epoch=0, shard=ShardSpec(0, 1))
        >>> grain.MapDataset.source(source).batch(32)
    """

    def __init__(
        self,
        dataset: Dataset,
        *,
        epoch: int = 0,
        shard: ShardSpec | None = None,
        block_size: int | None = None,
        drop_remainder: bool = False,
    ) -> None:
        self._dataset = dataset
        self._epoch = check_seed("epoch", epoch)
        self._shard = shard if shard is not None else ShardSpec()
        self._block_size = block_size
        if block_size is None:
            order = sample_order(len(dataset), seed=dataset.seed, epoch=self._epoch)
        else:
            order = block_order(dataset.lengths, block_size=block_size, seed=dataset.seed, epoch=self._epoch)
        self._order = shard_order(
            order, shard_index=self._shard.index, shard_count=self._shard.count, drop_remainder=drop_remainder
        )

    def __len__(self) -> int:
        return len(self._order)

    def __getitem__(self, record_key: int) -> dict[str, object]:
        return self._dataset.sample(int(self._order[record_key]))

    def __repr__(self) -> str:
        # Grain keys checkpoints on the source's repr: keep it stable across processes.
        return (
            f"OrderedSource(fingerprint={self._dataset.snapshot.fingerprint}, seed={self._dataset.seed}, "
            f"epoch={self._epoch}, shard={self._shard.index}/{self._shard.count}, "
            f"block_size={self._block_size})"
        )


def grain_dataset(
    dataset: Dataset,
    *,
    batch_size: int,
    epoch: int = 0,
    shard: ShardSpec | None = None,
    block_size: int | None = None,
    drop_last: bool = False,
) -> Any:
    """A `grain.MapDataset` of batches (dicts of numpy arrays) equal to `Loader`'s for the same
    arguments; use Grain's own prefetching (`.to_iter_dataset(...)`) to read in parallel.

    Example:
        >>> batches = grain_dataset(ds, batch_size=32, epoch=0, shard=ShardSpec.from_jax())
        >>> for batch in batches.to_iter_dataset(): ...
    """
    try:
        import grain
    except ImportError as err:
        raise ImportError("grain_dataset needs grain: pip install 'pi-lake[jax]'") from err
    from pi_loader.samples._gather import collate

    source = OrderedSource(dataset, epoch=epoch, shard=shard, block_size=block_size)
    return grain.MapDataset.source(source).batch(batch_size, drop_remainder=drop_last, batch_fn=collate)
