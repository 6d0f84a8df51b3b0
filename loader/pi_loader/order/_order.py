"""The sample order: a pure function of (sample layout, seed, epoch, shard index, shard count).

Architecture decision 5. Nothing here reads the global RNG, the number of worker processes or
the clock, so any host computes the same order for the same arguments.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import secrets
import stat
import struct
import sys
import tempfile
import threading
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np

from pi_loader._errors import ShardError

# Spawns a different stream than the global shuffle for the same (seed, epoch).
_BLOCK_STREAM = 1


def sample_order(num_samples: int, *, seed: int, epoch: int) -> np.ndarray:
    """A permutation of range(num_samples) drawn from SeedSequence([seed, epoch]).

    Example:
        >>> sample_order(5, seed=0, epoch=0).tolist()  # same inputs, same order, on any host
    """
    if num_samples < 0:
        raise ValueError(f"num_samples must be >= 0, got {num_samples}")
    rng = np.random.default_rng(np.random.SeedSequence([seed, epoch]))
    return rng.permutation(num_samples).astype(np.int64)


def block_order(episode_lengths: np.ndarray, *, block_size: int, seed: int, epoch: int) -> np.ndarray:
    """A permutation of the samples that keeps runs of up to `block_size` neighbouring steps of
    one episode together: blocks are shuffled, and samples inside a block are shuffled.

    Example:
        >>> block_order(np.array([5, 3]), block_size=2, seed=0, epoch=0)  # blocks of <= 2 steps
    """
    rng = np.random.default_rng(np.random.SeedSequence([seed, epoch, _BLOCK_STREAM]))
    return block_permutation(episode_lengths, block_size=block_size, rng=rng)[0]


def block_permutation(
    episode_lengths: np.ndarray, *, block_size: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """`block_order`'s permutation drawn from `rng`, and the block number of every flat sample
    (blocks numbered episode after episode): a block's samples are contiguous in the permutation.

    Example:
        >>> order, block_of = block_permutation(np.array([3]), block_size=2, rng=np.random.default_rng(0))
        >>> block_of.tolist()
        [0, 0, 1]
    """
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    lengths = np.asarray(episode_lengths, np.int64)
    n = int(lengths.sum())
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    # step of every flat sample inside its episode, then its block number
    episode_of = np.repeat(np.arange(len(lengths)), lengths)
    step = np.arange(n, dtype=np.int64) - offsets[episode_of]
    blocks_per_episode = -(-lengths // block_size)
    block_base = np.concatenate([[0], np.cumsum(blocks_per_episode)[:-1]]).astype(np.int64)
    block_of = block_base[episode_of] + step // block_size
    num_blocks = int(blocks_per_episode.sum())
    block_rank = np.empty(num_blocks, np.int64)
    block_rank[rng.permutation(num_blocks)] = np.arange(num_blocks)
    inside = rng.random(n)
    return np.lexsort((inside, block_rank[block_of])).astype(np.int64), block_of.astype(np.int64)


def shard_positions(num_samples: int, *, shard_index: int, shard_count: int, drop_remainder: bool) -> slice:
    """The slice of an epoch's order (length `num_samples`, padded cyclically when not dropping)
    that shard `shard_index` reads: contiguous, so block-shuffled runs stay on one host.

    Every shard gets the same count: ceil(n / k) with padding (the first few samples of the
    order repeat, fewer than k of them), or floor(n / k) with `drop_remainder`.
    """
    check_shard(shard_index, shard_count)
    per_shard = num_samples // shard_count if drop_remainder else -(-num_samples // shard_count)
    if per_shard == 0:
        raise ShardError(
            f"{num_samples} samples cannot give each of {shard_count} shards a sample"
            + (
                " with drop_remainder=True; use fewer shards or drop_remainder=False"
                if drop_remainder
                else ""
            )
        )
    return slice(shard_index * per_shard, (shard_index + 1) * per_shard)


def shard_order(order: np.ndarray, *, shard_index: int, shard_count: int, drop_remainder: bool) -> np.ndarray:
    """Shard `shard_index` of `order` (see `shard_positions`).

    Example:
        >>> shard_order(np.arange(10), shard_index=1, shard_count=3, drop_remainder=False).tolist()
        [4, 5, 6, 7]
    """
    where = shard_positions(
        len(order), shard_index=shard_index, shard_count=shard_count, drop_remainder=drop_remainder
    )
    stop = int(where.stop)
    padded = order if stop <= len(order) else np.resize(order, stop)
    return np.ascontiguousarray(padded[where])


def check_shard(shard_index: object, shard_count: object) -> None:
    for name, value in (("shard_index", shard_index), ("shard_count", shard_count)):
        if isinstance(value, bool) or not isinstance(value, int | np.integer):
            raise ShardError(f"{name} must be an int, got {value!r}")
    if not isinstance(shard_index, int | np.integer) or not isinstance(shard_count, int | np.integer):
        return  # unreachable: narrows the types for mypy
    if shard_count < 1:
        raise ShardError(f"shard_count must be >= 1, got {shard_count}")
    if not 0 <= shard_index < shard_count:
        raise ShardError(
            f"shard_index must be in [0, {shard_count - 1}] for shard_count={shard_count}, got {shard_index}"
        )


@dataclass(frozen=True, slots=True)
class ShardSpec:
    """Which part of every epoch this host reads: shard `index` of `count` equal parts.

    Example:
        >>> ShardSpec(index=0, count=8)
        >>> ShardSpec.from_jax()        # jax.process_index() of jax.process_count()
        >>> ShardSpec.from_torch()      # torch.distributed rank of world size
    """

    index: int = 0
    count: int = 1

    def __post_init__(self) -> None:
        check_shard(self.index, self.count)

    @classmethod
    def from_jax(cls) -> ShardSpec:
        """This JAX process's shard (one shard per host process)."""
        try:
            import jax
        except ImportError as err:
            raise ImportError("ShardSpec.from_jax needs jax: pip install 'pi-lake[jax]'") from err
        return cls(index=int(jax.process_index()), count=int(jax.process_count()))

    @classmethod
    def from_torch(cls) -> ShardSpec:
        """This torch.distributed rank's shard; the process group must be initialized."""
        try:
            import torch.distributed as dist
        except ImportError as err:
            raise ImportError("ShardSpec.from_torch needs torch: pip install 'pi-lake[torch]'") from err
        if not (dist.is_available() and dist.is_initialized()):
            raise ShardError(
                "torch.distributed is not initialized: call torch.distributed.init_process_group first, "
                "or pass ShardSpec(index=..., count=...)"
            )
        return cls(index=int(dist.get_rank()), count=int(dist.get_world_size()))

    @classmethod
    def auto(cls) -> ShardSpec:
        """torch.distributed when it is initialized, else JAX when it is imported, else (0, 1)."""
        dist = sys.modules.get("torch.distributed")
        if dist is not None and dist.is_available() and dist.is_initialized():
            return cls.from_torch()
        if "jax" in sys.modules:
            return cls.from_jax()
        return cls()


def check_seed(name: str, value: object) -> int:
    # SeedSequence needs non-negative ints; bool is an int subclass but never a meant seed.
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")
    return int(value)


# SharedEpoch's cell: 8 random bytes that identify it, then the epoch as a little-endian int64.
_CELL = struct.Struct("<8sq")


class SharedEpoch:
    """An epoch number that every copy of it reads: the object, and every pickled copy of it in
    other processes (e.g. persistent torch DataLoader workers, which hold a pickled Dataset).

    The value lives in a 16-byte memory file made by the process that creates the object: an
    anonymous `memfd` that copies open through `/proc/<pid>/fd/<fd>` on Linux (nothing is named,
    so a killed process leaks nothing), a temporary file elsewhere. A copy that cannot reach the
    cell (its maker has exited, or it was unpickled on another machine) keeps the value it was
    pickled with and reads that.

    Example:
        >>> epoch = SharedEpoch(0)
        >>> copy = pickle.loads(pickle.dumps(epoch))   # e.g. in a worker process
        >>> epoch.set(3)
        >>> copy.get()
        3
    """

    def __init__(self, epoch: int = 0) -> None:
        self._value = check_seed("epoch", epoch)
        self._token = secrets.token_bytes(8)
        self._lock = threading.Lock()
        self._map: mmap.mmap | None = None
        self._path: str | None = None
        self._attached = True  # this object made its cell (or has none): never try to open one
        with contextlib.suppress(OSError):
            self._map, self._path = _new_cell(self)
            _CELL.pack_into(self._map, 0, self._token, self._value)

    def get(self) -> int:
        """The epoch last `set` through this object or any copy of it."""
        cell = self._cell()
        if cell is None:
            return self._value
        token, value = _CELL.unpack_from(cell, 0)
        return int(value) if token == self._token else self._value

    def set(self, epoch: int) -> None:
        """Set the epoch every copy reads (int >= 0)."""
        value = check_seed("epoch", epoch)
        self._value = value
        cell = self._cell()
        if cell is not None:
            _CELL.pack_into(cell, 0, self._token, value)

    @property
    def shared(self) -> bool:
        """True when this object reads the cell its copies share (False: only its own value)."""
        return self._cell() is not None

    def _cell(self) -> mmap.mmap | None:
        if not self._attached:
            with self._lock:
                if not self._attached:
                    self._map = _open_cell(self._path, self._token)
                    self._attached = True
        return self._map

    def __getstate__(self) -> dict[str, Any]:
        return {"value": self.get(), "token": self._token, "path": self._path}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._value = int(state["value"])
        self._token = bytes(state["token"])
        self._path = state["path"]
        self._lock = threading.Lock()
        self._map = None
        self._attached = self._path is None  # open the cell on first use, in the process that reads

    def __repr__(self) -> str:
        return f"SharedEpoch({self.get()}, shared={self.shared})"


def _new_cell(owner: SharedEpoch) -> tuple[mmap.mmap, str]:
    """A fresh cell and the path copies open it by; it is closed (and a temporary file removed)
    when `owner` is garbage or the process exits."""
    if hasattr(os, "memfd_create") and os.path.isdir(f"/proc/{os.getpid()}/fd"):
        fd = os.memfd_create("pi_loader-epoch", os.MFD_CLOEXEC)
        path, remove = f"/proc/{os.getpid()}/fd/{fd}", None
    else:
        fd, path = tempfile.mkstemp(prefix="pi_loader-epoch-")
        remove = path
    try:
        os.ftruncate(fd, _CELL.size)
        cell = mmap.mmap(fd, _CELL.size)
    except BaseException:
        os.close(fd)
        raise
    weakref.finalize(owner, _close_cell, fd, os.getpid(), remove)
    return cell, path


def _close_cell(fd: int, pid: int, remove: str | None) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)
    if remove is not None and os.getpid() == pid:  # a forked child must not remove its parent's file
        with contextlib.suppress(OSError):
            os.unlink(remove)


def _open_cell(path: str | None, token: bytes) -> mmap.mmap | None:
    """The cell at `path` if it is still the one `token` names, else None."""
    if path is None:
        return None
    try:
        # O_NONBLOCK: after pid reuse the path may name a pipe or a device; never wait on it.
        fd = os.open(path, os.O_RDWR | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size != _CELL.size:
            return None
        cell = mmap.mmap(fd, _CELL.size)
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)
    if _CELL.unpack_from(cell, 0)[0] != token:
        cell.close()
        return None
    return cell
