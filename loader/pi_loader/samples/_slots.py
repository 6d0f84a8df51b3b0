"""Reused shared-memory slots for a torch DataLoader worker's batches (Linux memfd).

torch sends a worker's batch to the main process by moving each tensor to fresh shared memory
and passing its file descriptor through a socket per tensor. For a batch of 32 samples of three
224 px cameras that is 14 MB of new memory a batch, whose first touch (page faults, zeroing) cost
the worker ~0.45 ms a sample, plus a shared-memory file and an fd round trip per tensor
(benchmarks/loader/PROFILE.md). The native Loader instead reuses its slots.

Here a worker keeps a few slots, each one memfd mapped once, and writes a batch's arrays into a
free one; the tensors it hands to torch are `SlotTensor`s, which pickle as (worker pid, fd,
offset, shape, dtype). The main process maps the slot through `/proc/<pid>/fd/<fd>` and hands out
plain tensors over it. Each tensor's flag byte in the slot's header is set when it is pickled and
stays set until the main process's last view of that tensor is gone (a finalizer clears it); the
slot's last flag byte is set while any of the batch's arrays lives in the worker; the worker reuses a slot
only when all of its flags are clear: a batch a trainer still holds is never overwritten. With no
free slot (the trainer holds more batches than `MAX_SLOTS`), or where memfd is missing (not
Linux), the batch takes torch's own path, as before.

Torch is never imported here at module level: only where a DataLoader already did.
"""

from __future__ import annotations

import mmap
import os
import sys
import threading
import weakref
from typing import Any

import numpy as np

# Slots per worker process: a DataLoader keeps prefetch_factor (default 2) batches per worker in
# flight, and a trainer typically holds one or two more; past that batches take torch's path.
MAX_SLOTS = 8
# Header: one flag byte per tensor of the batch (a batch has ~8 arrays; more take torch's path);
# the last byte is the worker's own: set while any array of the slot's batch lives in the worker.
HEADER = 64
_WORKER_FLAG = HEADER - 1
_ALIGN = 64  # each array starts on a cache line


class Slot:
    """One memfd of `size` bytes mapped in this worker; arrays are cut from it in order."""

    def __init__(self, size: int) -> None:
        self.fd = os.memfd_create("pi_loader-batch", os.MFD_CLOEXEC)
        os.ftruncate(self.fd, size)
        self.size = size
        self.map = mmap.mmap(self.fd, size)
        self._held: np.ndarray | None = None
        self._base: weakref.ref[np.ndarray] | None = None
        self.used = HEADER
        self.tensors = 0

    def free(self) -> bool:
        return not any(self.map[:HEADER])

    def begin(self) -> None:
        """Start a batch: its arrays are views of a fresh array over the map, which every view
        keeps alive (numpy's base), so the worker's flag clears when the last one is gone."""
        self.used = HEADER
        self.tensors = 0
        self.map[_WORKER_FLAG] = 1
        base = np.frombuffer(self.map, dtype=np.uint8)
        weakref.finalize(base, _release, self.map, _WORKER_FLAG, False)
        self._held = base
        self._base = weakref.ref(base)

    def end(self) -> None:
        """The batch's arrays are out: from now on only they keep the worker's flag set."""
        self._held = None

    def array(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> tuple[np.ndarray, int] | None:
        """A new array of this slot and its offset, or None when it does not fit."""
        base = None if self._base is None else self._base()
        nbytes = int(np.prod(shape)) * dtype.itemsize
        start = -(-self.used // _ALIGN) * _ALIGN
        if base is None or start + nbytes > self.size:
            return None
        self.used = start + nbytes
        return base[start : start + nbytes].view(dtype).reshape(shape), start


class SlotPool:
    """This worker process's slots (one pool per process, made on first use)."""

    def __init__(self) -> None:
        self._slots: list[Slot] = []
        self._lock = threading.Lock()

    def acquire(self, size: int) -> Slot | None:
        """A free slot of at least `size` bytes (made when there are fewer than MAX_SLOTS), or
        None."""
        with self._lock:
            for slot in self._slots:
                if slot.size >= size and slot.free():
                    slot.begin()
                    return slot
            if len(self._slots) >= MAX_SLOTS:
                return None
            try:
                slot = Slot(size)
            except OSError:  # no memfd, or /dev/shm full: torch's own path
                return None
            self._slots.append(slot)
            slot.begin()
            return slot


_POOL: list[SlotPool] = []


def pool() -> SlotPool | None:
    """This process's slot pool, or None where memfd or /proc/<pid>/fd is missing."""
    if not hasattr(os, "memfd_create") or not os.path.isdir(f"/proc/{os.getpid()}/fd"):
        return None
    if not _POOL:
        _POOL.append(SlotPool())
    return _POOL[0]


def slot_tensor(slot: Slot, array: np.ndarray, offset: int) -> Any:
    """A SlotTensor over `array` (an array of `slot` at `offset`), its flag set in the slot."""
    flag = slot.tensors
    if flag >= _WORKER_FLAG:
        return None
    slot.tensors += 1
    tensor = _tensor_type()(array)
    tensor._slot, tensor._where = slot, (flag, offset)
    return tensor


def _tensor_type() -> Any:
    """The SlotTensor class (made on first use, once torch is imported)."""
    cls = _CLASS.get("SlotTensor")
    if cls is not None:
        return cls
    torch = sys.modules["torch"]

    class SlotTensor(torch.Tensor):  # type: ignore[name-defined]
        """A tensor over a worker's slot that pickles as where it lies there; any operation on
        it gives a plain tensor."""

        __torch_function__ = torch._C._disabled_torch_function_impl
        _slot: Slot
        _where: tuple[int, int]  # (its flag byte, its offset in the slot)

        @staticmethod
        def __new__(cls: Any, array: np.ndarray) -> Any:
            return torch.from_numpy(array).as_subclass(cls)

        def __reduce_ex__(self, protocol: Any) -> Any:
            slot, (flag, offset) = self._slot, self._where
            slot.map[flag] = 1  # set until the main process's last view of it is gone
            dtype = str(self.numpy().dtype)
            return (rebuild, (os.getpid(), slot.fd, slot.size, flag, offset, tuple(self.shape), dtype))

    _CLASS["SlotTensor"] = SlotTensor
    return SlotTensor


_CLASS: dict[str, Any] = {}


def rebuild(pid: int, fd: int, size: int, flag: int, offset: int, shape: tuple[int, ...], dtype: str) -> Any:
    """In the main process: a plain tensor over the worker's slot; the slot's flag for it is
    cleared when the last view of it is gone."""
    import torch

    with open(f"/proc/{pid}/fd/{fd}", "r+b", buffering=0) as f:
        mapped = mmap.mmap(f.fileno(), size)
    np_dtype = np.dtype(dtype)
    count = int(np.prod(shape))
    view = np.frombuffer(mapped, dtype=np_dtype, count=count, offset=offset)
    weakref.finalize(view, _release, mapped, flag, True)
    if count == 0:
        return torch.from_numpy(view.copy()).reshape(shape)
    return torch.frombuffer(view, dtype=torch.from_numpy(view[:0]).dtype, count=count).reshape(shape)


def _release(mapped: mmap.mmap, flag: int, close: bool) -> None:
    try:
        mapped[flag] = 0
        if close:
            mapped.close()
    except (ValueError, BufferError):  # already closed, or still exported: unmapped when collected
        pass
