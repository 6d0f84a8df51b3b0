"""Batches onto the accelerator, copied while the previous step computes (decision 12).

On a GPU host the copy of a batch to the device was synchronous, from pageable memory, and
not overlapped: 24-42% of every step once the data wait was gone (issue 23). A `DeviceFeed`
moves that work off the training loop: a thread takes the loader's batches and starts each
one's copy `depth` batches ahead of the step that needs it, so the step finds its inputs on the
device, or waits only for the part of the copy that compute did not hide (`copy_wait_s`).

- torch (`TorchFeed`): uint8 frames and float arrays are copied into page-locked staging
  buffers that are allocated once and reused (a ring of `depth + 2` sets; a set is rewritten
  only after its previous copy finished), then to the device with `non_blocking=True` on a side
  stream; the consumer's stream waits on the copy's event. On the CPU the arrays are wrapped,
  not copied.
- JAX (`JaxFeed`): `jax.device_put` (or `make_array_from_process_local_data` with a sharding)
  is asynchronous: the thread dispatches each batch `depth` ahead (double-buffered with the
  default depth of 2) and the consumer blocks only until that batch's arrays are ready.

uint8 crosses the bus: normalization and float conversion belong on the device (the reference
trainer's encoder divides by 255 there). Strings ("episode_id") stay on the host. A `Loader`'s
state is taken right after each batch leaves it and travels with the batch (`FedBatch.state`),
so a checkpoint saves the position of the batch being trained on, not of the batches fetched
ahead.
"""

from __future__ import annotations

import abc
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pi_loader._errors import PiLoaderError

# Batches copied ahead of the step: 2 is double buffering (one copying while one is consumed).
DEFAULT_DEPTH = 2
_STOP = object()


@dataclass(frozen=True, slots=True)
class FedBatch:
    """One batch on the device, with what it cost the consumer to get it.

    Args:
        inputs: the batch's numeric arrays on the device (torch tensors or jax Arrays).
        host: the loader's batch as it came (numpy; ids and steps for logging).
        state: the loader's state right after this batch (None when the source is no Loader).
        data_wait_s: seconds the consumer waited for the batch to leave the loader.
        copy_wait_s: seconds it then waited for the batch's copy to the device to finish (the
            exposed copy: 0 when compute hid it).
    """

    inputs: dict[str, Any]
    host: dict[str, np.ndarray]
    state: dict[str, Any] | None
    data_wait_s: float
    copy_wait_s: float


def _numeric(batch: dict[str, np.ndarray], keys: Sequence[str] | None) -> dict[str, np.ndarray]:
    chosen = batch if keys is None else {k: batch[k] for k in keys}
    return {k: v for k, v in chosen.items() if v.dtype.kind not in "USO"}


class DeviceFeed(abc.ABC):
    """Iterator of `FedBatch`: a thread stages each batch `depth` ahead of the consumer.

    Subclasses say how a batch is staged (`_stage`, on the thread) and how the consumer waits
    for it (`_ready`). Use it as a context manager or call `close()`; an error on the thread is
    raised from `next()`.

    Args:
        batches: the source (a `Loader`, or any iterable of numpy batch dicts).
        depth: batches staged ahead (>= 1).
        keys: the keys to copy (None: every numeric array).
        state: called after each batch leaves the source, its result kept as `FedBatch.state`
            (default: `source.get_state` when the source has one).
    """

    def __init__(
        self,
        batches: Iterable[dict[str, np.ndarray]],
        *,
        depth: int = DEFAULT_DEPTH,
        keys: Sequence[str] | None = None,
        state: Callable[[], dict[str, Any]] | None = None,
    ) -> None:
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
            raise ValueError(f"depth must be an int >= 1 (batches copied ahead), got {depth!r}")
        self._source = batches
        self._depth = depth
        self._keys = tuple(keys) if keys is not None else None
        get_state = getattr(batches, "get_state", None)
        self._state = state if state is not None else get_state
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=depth)
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    # -- subclass hooks ---------------------------------------------------------------------

    def _start_thread(self) -> None:  # noqa: B027 - an optional hook, empty by default
        """Runs first on the feed's thread (e.g. to select the CUDA device)."""

    @abc.abstractmethod
    def _stage(self, arrays: dict[str, np.ndarray]) -> Any:
        """On the feed's thread: start moving `arrays` to the device; return a handle."""

    @abc.abstractmethod
    def _ready(self, staged: Any) -> dict[str, Any]:
        """On the consumer's thread: wait until the handle's arrays are usable; return them."""

    # -- the thread -------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._start_thread()
            for batch in self._source:
                state = self._state() if self._state is not None else None
                staged = self._stage(_numeric(batch, self._keys))
                while not self._stopping.is_set():
                    try:
                        self._queue.put((staged, batch, state), timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if self._stopping.is_set():
                    return
            self._put_final(_STOP)
        except BaseException as err:  # raised to the consumer by next()
            self._put_final(err)

    def _put_final(self, item: object) -> None:
        while not self._stopping.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    # -- the consumer -----------------------------------------------------------------------

    def __iter__(self) -> Iterator[FedBatch]:
        return self

    def __next__(self) -> FedBatch:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="pi_loader-device-feed", daemon=True)
            self._thread.start()
        t0 = time.perf_counter()
        try:
            item = self._queue.get_nowait()  # ready: no wait, no lock hand-over between threads
        except queue.Empty:
            item = self._queue.get()
        t1 = time.perf_counter()
        if item is _STOP:
            self._queue.put(_STOP)  # later calls stop too
            raise StopIteration
        if isinstance(item, BaseException):
            self._queue.put(item)
            if isinstance(item, PiLoaderError):
                raise item
            raise PiLoaderError(f"the device feed's thread failed: {item!r}") from item
        staged, batch, state = item
        inputs = self._ready(staged)
        t2 = time.perf_counter()
        return FedBatch(inputs=inputs, host=batch, state=state, data_wait_s=t1 - t0, copy_wait_s=t2 - t1)

    def close(self) -> None:
        """Stop the thread (batches staged ahead are dropped; the source is not closed)."""
        self._stopping.set()
        if self._thread is not None:
            while self._thread.is_alive():
                try:
                    self._queue.get(timeout=0.1)
                except queue.Empty:
                    continue
            self._thread = None

    def __enter__(self) -> DeviceFeed:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class TorchFeed(DeviceFeed):
    """`DeviceFeed` for torch: pinned, reused staging buffers and copies on a side stream.

    Example:
        >>> with TorchFeed(loader, device="cuda", keys=("observation.images.front", "action")) as feed:
        ...     for fed in feed:
        ...         loss = step(fed.inputs)          # fed.copy_wait_s: the copy compute did not hide
    """

    def __init__(
        self,
        batches: Iterable[dict[str, np.ndarray]],
        *,
        device: Any = "cuda",
        depth: int = DEFAULT_DEPTH,
        keys: Sequence[str] | None = None,
        state: Callable[[], dict[str, Any]] | None = None,
    ) -> None:
        super().__init__(batches, depth=depth, keys=keys, state=state)
        try:
            import torch
        except ImportError as err:
            raise ImportError("TorchFeed needs torch: pip install 'pi-lake[torch]'") from err
        self._torch = torch
        self.device = torch.device(device)
        self._cuda = self.device.type == "cuda"
        if self._cuda and not torch.cuda.is_available():
            raise ValueError(f"device={device!r} is a CUDA device but this torch sees none")
        # depth staged + one being filled + one whose copy may still run
        self._ring: list[dict[str, Any]] = [{} for _ in range(depth + 2)]
        self._events: list[Any] = [None] * (depth + 2)
        self._next_slot = 0
        self._stream: Any = None

    def _start_thread(self) -> None:
        if self._cuda:
            self._torch.cuda.set_device(self.device)
            self._stream = self._torch.cuda.Stream(device=self.device)

    def _pinned(self, slot: int, key: str, value: np.ndarray) -> Any:
        torch = self._torch
        buffers = self._ring[slot]
        held = buffers.get(key)
        shape, dtype = tuple(value.shape), torch.from_numpy(value[:0]).dtype
        if held is None or tuple(held.shape) != shape or held.dtype != dtype:
            held = torch.empty(shape, dtype=dtype, pin_memory=True)  # once per slot and shape
            buffers[key] = held
        return held

    def _stage(self, arrays: dict[str, np.ndarray]) -> Any:
        torch = self._torch
        if not self._cuda:
            return {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in arrays.items()}
        slot = self._next_slot
        self._next_slot = (slot + 1) % len(self._ring)
        previous = self._events[slot]
        if previous is not None:
            previous.synchronize()  # this slot's last copy must have left before it is rewritten
        staged: dict[str, Any] = {}
        with torch.cuda.stream(self._stream):
            for key, value in arrays.items():
                pinned = self._pinned(slot, key, value)
                pinned.copy_(torch.from_numpy(np.ascontiguousarray(value)))
                staged[key] = pinned.to(self.device, non_blocking=True)
            event = torch.cuda.Event()
            event.record(self._stream)
        self._events[slot] = event
        return staged, event

    def _ready(self, staged: Any) -> dict[str, Any]:
        if not self._cuda:
            return dict(staged)
        tensors, event = staged
        if not event.query():  # a finished copy needs no wait (and no GIL release to get back)
            event.synchronize()  # the exposed part of the copy
        current = self._torch.cuda.current_stream(self.device)
        current.wait_event(event)
        for tensor in tensors.values():
            tensor.record_stream(current)  # allocated on the side stream, used on this one
        return dict(tensors)


class JaxFeed(DeviceFeed):
    """`DeviceFeed` for JAX: each batch dispatched `depth` ahead with `jax.device_put` (or, with a
    sharding, as this process's part of a global array).

    Example:
        >>> with JaxFeed(loader, sharding=sharding) as feed:
        ...     for fed in feed:
        ...         state, loss = train_step(state, fed.inputs)
    """

    def __init__(
        self,
        batches: Iterable[dict[str, np.ndarray]],
        *,
        sharding: Any = None,
        depth: int = DEFAULT_DEPTH,
        keys: Sequence[str] | None = None,
        state: Callable[[], dict[str, Any]] | None = None,
    ) -> None:
        super().__init__(batches, depth=depth, keys=keys, state=state)
        try:
            import jax
        except ImportError as err:
            raise ImportError("JaxFeed needs jax: pip install 'pi-lake[jax]'") from err
        self._jax = jax
        self._sharding = sharding

    def _stage(self, arrays: dict[str, np.ndarray]) -> Any:
        jax = self._jax
        if self._sharding is None:
            return {k: jax.device_put(v) for k, v in arrays.items()}
        return {k: jax.make_array_from_process_local_data(self._sharding, v) for k, v in arrays.items()}

    def _ready(self, staged: Any) -> dict[str, Any]:
        arrays = dict(staged)
        if all(getattr(a, "is_ready", lambda: False)() for a in arrays.values()):
            return arrays  # already on the device: no blocking call
        return dict(self._jax.block_until_ready(arrays))
