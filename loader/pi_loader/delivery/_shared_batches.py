"""Shared-memory slots that carry a batch's images from a loader worker to the main process.

A batch of 32 samples of 3 cameras at 224x224 is ~14 MB of frames; pickling it through a pipe
cost ~19 ms per batch here (~0.6 ms per sample, as much as decoding it). Instead the main
process owns a pool of anonymous memory files (`memfd_create`); a worker opens a slot through
`/proc/<main pid>/fd/<fd>`, writes the frames straight into it, and sends back only where
each array lies. The main process hands out numpy arrays over the slot without copying; the
slot returns to the pool when the last of those arrays (and every view of them) is garbage.
Nothing is named in /dev/shm, so a killed process leaks nothing.

Linux only (`os.memfd_create` and /proc); elsewhere `shared_memory_available()` is False and the
loader pickles whole batches.
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
import threading
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np

_ALIGN_BYTES = 64  # cache-line aligned arrays


def aligned_bytes(size_bytes: int) -> int:
    """`size_bytes` rounded up to where the next array in a slot may start."""
    return -(-size_bytes // _ALIGN_BYTES) * _ALIGN_BYTES


def shared_memory_available() -> bool:
    """True where slots work: `os.memfd_create` and /proc/<pid>/fd exist."""
    return hasattr(os, "memfd_create") and os.path.isdir(f"/proc/{os.getpid()}/fd")


@dataclass(frozen=True, slots=True)
class SlotTicket:
    """What a worker needs to find a slot: sent with the task, picklable."""

    slot_id: int
    path: str  # /proc/<owner pid>/fd/<fd>
    size_bytes: int


@dataclass(frozen=True, slots=True)
class ArrayPlacement:
    """Where a worker put one array in its slot."""

    offset_bytes: int
    shape: tuple[int, ...]
    dtype: str


class _Slot:
    """One memory file of the pool, mapped in the main process."""

    def __init__(self, slot_id: int, size_bytes: int) -> None:
        self.slot_id = slot_id
        self.size_bytes = size_bytes
        self._fd = os.memfd_create(f"pi_loader-batch-{slot_id}", os.MFD_CLOEXEC)
        try:
            os.ftruncate(self._fd, size_bytes)
            self._map = mmap.mmap(self._fd, size_bytes)
        except BaseException:
            os.close(self._fd)
            raise
        # The mapping's address, for arrays over it; this export keeps the map from closing
        # while the slot lives. The slot lives while any array handed out over it does.
        self._anchor = ctypes.c_char.from_buffer(self._map)
        self.address = ctypes.addressof(self._anchor)
        self.ticket = SlotTicket(slot_id, f"/proc/{os.getpid()}/fd/{self._fd}", size_bytes)
        weakref.finalize(self, _close_slot, self._fd)


def _close_slot(fd: int) -> None:
    # The mapping goes with the last reference to the mmap object; the fd is closed here.
    with contextlib.suppress(OSError):
        os.close(fd)


class _SlotArray:
    """Exposes a region of a slot to numpy; the arrays made from it keep it (and the lease) alive."""

    def __init__(self, lease: _Lease, placement: ArrayPlacement) -> None:
        self._lease = lease
        self.__array_interface__ = {
            "shape": placement.shape,
            "typestr": placement.dtype,
            "data": (lease.slot.address + placement.offset_bytes, False),
            "version": 3,
        }


class _Lease:
    """A slot handed out with one batch; returned to the pool when the batch's arrays are gone."""

    def __init__(self, pool: SlotPool, slot: _Slot) -> None:
        self.slot = slot
        weakref.finalize(self, pool.release, slot)


class SlotPool:
    """The main process's slots, all of `slot_bytes`; grows when every slot is in use.

    In use means: sent to a worker, or carrying a batch whose arrays are still referenced.
    With a training loop that drops each batch before taking the next, the pool holds about
    prefetch_batches + 2 slots. At most `max_free_slots` are kept free for reuse; a slot
    released beyond that is unmapped, so batches kept for a while do not pin memory forever.
    """

    def __init__(self, slot_bytes: int, *, max_free_slots: int = 8) -> None:
        self.slot_bytes = max(int(slot_bytes), _ALIGN_BYTES)
        self.max_free_slots = max(int(max_free_slots), 0)
        self._free: list[_Slot] = []
        self._in_use: dict[int, _Slot] = {}
        self._next_id = 0
        self._lock = threading.Lock()  # release() runs from garbage collection, on any thread

    @property
    def slot_count(self) -> int:
        with self._lock:
            return len(self._free) + len(self._in_use)

    def acquire(self) -> _Slot:
        with self._lock:
            if self._free:
                slot = self._free.pop()
            else:
                slot = _Slot(self._next_id, self.slot_bytes)
                self._next_id += 1
            self._in_use[slot.slot_id] = slot
            return slot

    def slot(self, slot_id: int) -> _Slot:
        with self._lock:
            return self._in_use[slot_id]

    def release(self, slot: _Slot) -> None:
        with self._lock:
            if self._in_use.pop(slot.slot_id, None) is not None and len(self._free) < self.max_free_slots:
                self._free.append(slot)

    def arrays(self, slot: _Slot, placements: dict[str, ArrayPlacement]) -> dict[str, np.ndarray]:
        """Arrays over the slot for `placements`, zero-copy; the slot comes back to the pool
        once all of them (and their views) are garbage."""
        lease = _Lease(self, slot)
        return {key: np.asarray(_SlotArray(lease, p)) for key, p in placements.items()}

    def close(self) -> None:
        """Forget every slot; slots under live arrays stay mapped until those arrays go."""
        with self._lock:
            self._free.clear()
            self._in_use.clear()


class SlotWriter:
    """A worker's view of the pool: opens slots by ticket and places arrays in them."""

    def __init__(self) -> None:
        self._maps: dict[int, mmap.mmap] = {}

    def _map(self, ticket: SlotTicket) -> mmap.mmap:
        mapped = self._maps.get(ticket.slot_id)
        if mapped is None:
            fd = os.open(ticket.path, os.O_RDWR)
            try:
                mapped = mmap.mmap(fd, ticket.size_bytes)
            finally:
                os.close(fd)
            self._maps[ticket.slot_id] = mapped
        return mapped

    def allocator(self, ticket: SlotTicket) -> tuple[Any, dict[str, ArrayPlacement]]:
        """(allocate(key, shape, dtype=uint8) -> array in the slot, or a plain array when it
        is full; the placements made), for `Dataset.samples(allocate=...)`."""
        placements: dict[str, ArrayPlacement] = {}
        try:
            mapped: mmap.mmap | None = self._map(ticket)
        except OSError:  # /proc hidden or restricted here: every array is pickled instead
            mapped = None
        used = [0]

        def allocate(key: str, shape: tuple[int, ...], dtype: Any = np.uint8) -> np.ndarray:
            kind = np.dtype(dtype)
            size = int(np.prod(shape, dtype=np.int64)) * kind.itemsize
            offset = used[0]
            if mapped is None or offset + size > ticket.size_bytes:  # pickled instead
                return np.empty(shape, kind)
            used[0] = aligned_bytes(offset + size)
            placements[key] = ArrayPlacement(offset, tuple(shape), kind.str)
            return np.ndarray(shape, kind, buffer=mapped, offset=offset)

        return allocate, placements
