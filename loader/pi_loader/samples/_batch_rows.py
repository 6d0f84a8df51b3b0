"""Samples that are rows of one batch, so a torch DataLoader's collate hands the batch out whole.

`Dataset.__getitems__` (what a torch `DataLoader` with a batch size calls, torch >= 2.1) builds its
samples as one batch. torch's default collate would then stack them again into new tensors: a
copy of every frame (14 MB for 32 samples of 3 cameras at 224 px) and, in a worker, into fresh
shared memory (benchmarks/loader/PROFILE.md: ~0.2 ms a sample). Instead the samples are
`BatchRow`s that remember their batch; a collate function registered for that type in torch's
`default_collate_fn_map` (the extension point of `torch.utils.data.default_collate`) hands out the
batch's own arrays as tensors when it is given all the rows of one batch in order, and collates
like torch's default for anything else. In a DataLoader worker the frames are decoded straight
into one of the worker's reused shared-memory slots (`_slots`: no fresh memory a batch, no fd
round trip per tensor), the batch's other arrays copied beside them, so the main process gets
tensors over the slot; without a free slot, into torch shared memory as torch's collate would.
The batch is what the default collate of the same samples gives: the same values, dtypes and
types ("episode_id" a list of str, "step" int64).

Torch is never imported here: only where the caller (a DataLoader) already did.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pi_loader.samples._slots import Slot, pool, slot_tensor

_REGISTERED: list[bool] = []


class BatchRow(dict[str, object]):
    """One sample (a dict, as `Dataset[i]` gives) that is row `row` of `batch`'s arrays."""

    __slots__ = ("batch", "row", "shared", "slot")

    batch: dict[str, np.ndarray]
    row: int
    shared: dict[str, Any]  # image key -> the torch tensor its array is a view of (in a worker)
    slot: Slot | None  # the worker's slot the batch's arrays are cut from


def torch_allocator(nbytes: int = 0) -> tuple[Any, dict[str, Any], Slot | None] | None:
    """(allocate, tensors, slot) that put a batch's images in one of this worker's shared-memory
    slots of at least `nbytes` (else in torch shared memory, as its collate would) when this runs
    in a torch DataLoader worker, else None."""
    torch = sys.modules.get("torch")
    if torch is None or torch.utils.data.get_worker_info() is None:
        return None
    tensors: dict[str, Any] = {}
    slots = pool()
    slot = None if slots is None or nbytes <= 0 else slots.acquire(nbytes)

    def allocate(key: str, shape: tuple[int, ...]) -> np.ndarray:
        if slot is not None:
            cut = slot.array(shape, np.dtype(np.uint8))
            if cut is not None:
                tensor = slot_tensor(slot, *cut)
                if tensor is not None:
                    tensors[key] = tensor
                    return cut[0]
        elem = torch.empty(0, dtype=torch.uint8)
        storage = elem._typed_storage()._new_shared(int(np.prod(shape)), device="cpu")
        tensor = elem.new(storage).resize_(*shape)
        tensors[key] = tensor
        return np.asarray(tensor.numpy())

    return allocate, tensors, slot


def batch_rows(
    batch: dict[str, np.ndarray], shared: dict[str, Any], slot: Slot | None = None
) -> list[dict[str, object]]:
    """The samples of `batch` (as `Dataset.sample` gives them) as BatchRows."""
    register_collate()
    ids, steps = batch["episode_id"].tolist(), batch["step"].tolist()
    rows: list[dict[str, object]] = []
    for row, (episode_id, step) in enumerate(zip(ids, steps, strict=True)):
        sample = BatchRow({key: value[row] for key, value in batch.items()})
        sample["episode_id"], sample["step"] = episode_id, step
        sample.batch, sample.row, sample.shared, sample.slot = batch, row, shared, slot
        rows.append(sample)
    return rows


def register_collate() -> None:
    """Register `collate_rows` for BatchRow in torch's default collate (once, where torch is
    imported)."""
    if _REGISTERED:
        return
    torch = sys.modules.get("torch")
    if torch is None:
        return
    from torch.utils.data._utils.collate import default_collate_fn_map

    default_collate_fn_map[BatchRow] = collate_rows
    _REGISTERED.append(True)


def collate_rows(rows: Sequence[Mapping[str, object]], *, collate_fn_map: Any = None) -> dict[str, Any]:
    """The batch of `rows` as tensors: the rows' own batch when they are all of its rows in order,
    else torch's default collate of each key."""
    from torch.utils.data._utils.collate import collate

    first = rows[0]
    if isinstance(first, BatchRow):
        batch = first.batch
        whole = len(rows) == len(batch["step"]) and all(
            isinstance(r, BatchRow) and r.batch is batch and r.row == i for i, r in enumerate(rows)
        )
        if whole:
            out: dict[str, Any] = {}
            for key in first:
                value = batch[key]
                if key == "episode_id":
                    out[key] = value.tolist()
                elif key in first.shared:
                    out[key] = first.shared[key]
                else:
                    if key == "step":
                        value = value.astype(np.int64)  # what collating ints gives
                    out[key] = _in_slot(first.slot, value)
            return out
    return {key: collate([r[key] for r in rows], collate_fn_map=collate_fn_map) for key in first}


def _in_slot(slot: Slot | None, value: np.ndarray) -> Any:
    """`value` as a tensor: a copy in `slot` (a SlotTensor) when it fits, else over its own
    memory (torch moves it to shared memory when it sends it)."""
    import torch

    if slot is not None:
        cut = slot.array(value.shape, value.dtype)
        if cut is not None:
            tensor = slot_tensor(slot, *cut)
            if tensor is not None:
                cut[0][...] = value
                return tensor
    return torch.from_numpy(np.ascontiguousarray(value))
