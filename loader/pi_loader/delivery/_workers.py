"""The loader's worker processes: batches of a Dataset read and decoded in parallel, in order.

Both sides of the pipe live here. The main process (`WorkerPool`) puts the batches of an
iteration on one task queue that every worker takes from (a fast worker takes more), keeps as
many in flight as its `InFlightPlan` allows (growing while it still waits for batches), and
hands the batches back in order, so the number of workers changes speed, never the batches. A worker
(`_worker_main`) builds each batch with `Dataset.samples`, writing frames into the batch's
shared-memory slot (`_shared_batches`) when there is one, so images cross without pickling.
A Dataset's worker holds no per-episode array of the selection: each task carries the rows of
its batch's episodes (`_batch_episodes`), so a worker's memory does not grow with the selection.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import queue
import traceback
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from pi_loader._errors import PiLoaderError, WorkerError
from pi_loader._processes import context
from pi_loader.delivery._batch_episodes import EpisodeTable
from pi_loader.delivery._heap import HeapTrimmer, TrimPolicy
from pi_loader.delivery._in_flight import InFlightPlan
from pi_loader.delivery._shared_batches import ArrayPlacement, SlotPool, SlotTicket, SlotWriter, aligned_bytes
from pi_loader.delivery._shared_dataset import SharedDatasetImage, SharedDatasetRef
from pi_loader.samples._dataset import Dataset
from pi_loader.samples._mixture import Mixture

# How often the main process checks that workers are alive while it waits for a batch.
_POLL_S = 1.0
# Numeric arrays of a batch from this size on travel in its shared-memory slot (smaller ones are
# cheaper pickled), and the room each sample gets for them in a slot beside its images: 16 kB
# holds a 100-step action chunk of 40 float32 dimensions; what does not fit is pickled.
_SLOT_MIN_BYTES = 4096
_SLOT_EXTRA_BYTES_PER_SAMPLE = 16 * 1024


def read_counters(dataset: Dataset | Mixture) -> dict[str, int]:
    """What `dataset` read in this process so far (`Dataset.read_stats`)."""
    return dataset.read_stats


def counter_deltas(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {key: after[key] - before.get(key, 0) for key in after}


def _build(
    dataset: Dataset | Mixture, indices: np.ndarray, ticket: SlotTicket | None, writer: SlotWriter
) -> tuple[dict[str, np.ndarray], dict[str, ArrayPlacement], list[str]]:
    """A batch for the main process: (arrays to pickle, arrays placed in the slot, key order)."""
    if ticket is None:
        batch = dataset.samples(indices)
        return batch, {}, list(batch)
    allocate, placements = writer.allocator(ticket)
    batch = dataset.samples(indices, allocate=allocate)
    if len(batch["step"]) != len(indices):  # samples skipped (on_corrupt="skip"): plain arrays
        return batch, {}, list(batch)
    order = list(batch)
    # The other large numeric arrays (the action chunk: 90 kB for 32 x 50 x 14) go in the slot
    # too: a copy here instead of a pickle through the pipe and its reads in the main process
    # (~0.02 ms a sample of CPU: benchmarks/loader/PROFILE.md).
    for key, value in batch.items():
        if key not in placements and value.dtype.kind in "biuf" and value.nbytes >= _SLOT_MIN_BYTES:
            into = allocate(key, value.shape, value.dtype)
            if key in placements:
                np.copyto(into, value)
    return {k: v for k, v in batch.items() if k not in placements}, placements, order


# Builds a batch in a worker instead of `Dataset.samples` (decoder="nvdec": the compressed
# frames, pi_loader.decoding._compressed); None: the CPU path.
BatchBuilder = Callable[[Any, np.ndarray], dict[str, Any]]


def _worker_main(
    shared: SharedDatasetRef,
    tasks: Any,
    results: Any,
    build: BatchBuilder | None = None,
    trim: TrimPolicy | None = None,
) -> None:
    # Runs in a worker process: build batches until told to stop (None).
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    if shared.per_batch:  # each task carries its batch's per-episode rows
        dataset, episodes = shared.load_per_batch()
    else:
        dataset, episodes = shared.load(), None
    # The process that made this worker, whichever start method: with forkserver the OS parent
    # is the forkserver (alive as long as its workers are), so getppid() would never change
    # when the loader's process dies; multiprocessing's parent sentinel does.
    creator = multiprocessing.parent_process()
    parent = os.getppid()
    writer = SlotWriter()
    # glibc keeps the heap freed after reading a new file: given back between batches
    # (pi_loader.delivery._heap); a trim after batch n is counted in batch n+1's counters
    trimmer = HeapTrimmer(trim if trim is not None else TrimPolicy())
    trims_sent = trimmer.counters()
    while True:
        try:
            task = tasks.get(timeout=_POLL_S)
        except queue.Empty:
            gone = creator is not None and not creator.is_alive()
            if gone or os.getppid() != parent:  # the loader's process died (e.g. SIGKILL): do not linger
                return
            continue
        if task is None:
            # Batches still buffered for the main process are no longer wanted (it is closing):
            # exit without flushing them into a pipe nobody reads (the feeder thread would block
            # the exit until close() terminates the worker after its timeout).
            results.cancel_join_thread()
            return
        generation, batch_number, indices, ticket, rows = task
        if episodes is not None:
            episodes.install(rows)
        before = {**read_counters(dataset), **trims_sent}
        try:
            if build is None:
                built = _build(dataset, indices, ticket, writer)
            else:
                made = build(dataset, indices)
                built = (made, {}, list(made))
            trims_now = trimmer.counters()
            counters = counter_deltas(before, {**read_counters(dataset), **trims_now})
            trims_sent = trims_now
            results.put((generation, batch_number, built, counters, None))
            del built
            trimmer.after_batch()
        except BaseException as err:  # sent to the main process, which raises it
            try:
                results.put((generation, batch_number, None, {}, err))
            except Exception:
                results.put((generation, batch_number, None, {}, WorkerError(traceback.format_exc())))


class WorkerPool:
    """Worker processes that build batches of `dataset`, started on first use.

    Args:
        dataset: the Dataset each worker gets a pickled copy of.
        batch_size: samples per batch (sizes the shared-memory slots).
        num_workers: worker processes (>= 1 to call `batches`; none start before it).
        in_flight: how many batches are in flight, and how far that may grow.
        mp_context: multiprocessing start method ("forkserver": preloaded, `pi_loader._processes`).
        shared_memory: carry images in shared-memory slots (the caller checks it is available).
        build: what builds a batch in a worker instead of `Dataset.samples` (a module-level
            function, pickled to the workers; pass shared_memory=False with it).

    Example:
        >>> plan = plan_in_flight(
        ...     num_workers=2, batch_bytes=2**20, prefetch_batches=None, prefetch_bytes=None
        ... )
        >>> pool = WorkerPool(ds, batch_size=32, num_workers=2, in_flight=plan,
        ...                   mp_context="forkserver", shared_memory=True)
        >>> for batch, reads in pool.batches([np.arange(32)]): ...   # reads: read_stats deltas
        >>> pool.close()
    """

    def __init__(
        self,
        dataset: Dataset | Mixture,
        *,
        batch_size: int,
        num_workers: int,
        in_flight: InFlightPlan,
        mp_context: str,
        shared_memory: bool,
        build: BatchBuilder | None = None,
    ) -> None:
        self._dataset = dataset
        self._build = build  # a picklable function, or None: Dataset.samples
        self._batch_size = batch_size
        self._num_workers = num_workers
        self._plan = in_flight
        self.depth = in_flight.initial  # batches in flight now (grows up to in_flight.maximum)
        self._mp_context = mp_context
        self._shared_memory = shared_memory
        self._pool: SlotPool | None = None
        self._slots: dict[tuple[int, int], Any] = {}  # (generation, batch number) -> slot in flight
        self._workers: list[Any] = []
        self._tasks: Any = None  # one queue all workers take from
        self._results: Any = None
        self._generation = 0
        self._image: SharedDatasetImage | None = None
        self._episodes: EpisodeTable | None = None
        # prefetch depth after the latest batch handed out (read by pi_loader.delivery._metrics): built
        # and waiting, and requested but not handed out
        self.ready_batches = 0
        self.in_flight_batches = 0

    @property
    def slot_pool(self) -> SlotPool | None:
        """The shared-memory slots, while the workers run with shared memory."""
        return self._pool

    def _start_workers(self) -> None:
        if self._workers:
            return
        ctx: Any = context(self._mp_context)
        shapes = self._dataset.image_shapes()
        if self._shared_memory and shapes:
            slot_bytes = sum(aligned_bytes(self._batch_size * int(np.prod(s))) for s in shapes.values())
            slot_bytes += self._batch_size * _SLOT_EXTRA_BYTES_PER_SAMPLE
            self._pool = SlotPool(slot_bytes, max_free_slots=self._plan.maximum + 2)
        self._results = ctx.Queue()
        self._tasks = ctx.Queue()
        # the Dataset's large arrays travel once, through a file every worker maps
        # (a Dataset built by Dataset.samples: without its per-episode arrays, sent per batch)
        if isinstance(self._dataset, Dataset) and self._build is None:
            self._episodes = EpisodeTable(self._dataset)
        self._image = SharedDatasetImage(self._dataset, episodes=self._episodes)
        # read here, not in the worker: a forkserver started earlier keeps the environment it had
        trim = TrimPolicy.from_env()
        for w in range(self._num_workers):
            proc = ctx.Process(
                target=_worker_main,
                args=(self._image.ref, self._tasks, self._results, self._build, trim),
                name=f"pi_loader-worker-{w}",
                daemon=True,
            )
            proc.start()
            self._workers.append(proc)

    def batches(self, work: Sequence[np.ndarray]) -> Iterator[tuple[dict[str, np.ndarray], dict[str, int]]]:
        """Each batch of flat sample indices in `work`, built by the workers and yielded in
        order, with what it took to read (deltas of `Dataset.read_stats`). Starting another iteration
        abandons this one: its batches still in flight are dropped when they arrive."""
        self._start_workers()
        self._generation += 1
        generation = self._generation
        done: dict[int, tuple[dict[str, np.ndarray], dict[str, int]]] = {}
        sent = 0
        for b in range(len(work)):
            while sent < len(work) and sent < b + self.depth:
                ticket = None
                if self._pool is not None:
                    slot = self._pool.acquire()
                    self._slots[(generation, sent)] = slot
                    ticket = slot.ticket
                rows = None if self._episodes is None else self._episodes.rows(work[sent])
                self._tasks.put((generation, sent, work[sent], ticket, rows))
                sent += 1
            while b not in done and self._receive(generation, done, block=False):
                pass
            if b not in done and b >= self._num_workers:
                # Past the first round (cold caches), waiting means too little is in flight.
                self.depth = self._plan.grow(self.depth)
            while b not in done:
                self._receive(generation, done)
            built = done.pop(b)
            self.ready_batches, self.in_flight_batches = len(done), sent - b - 1
            yield built

    def _receive(self, generation: int, done: dict[int, Any], *, block: bool = True) -> bool:
        """Take one result (waiting up to `_POLL_S` when `block`); False when none came."""
        try:
            if block:
                gen, number, built, counters, err = self._results.get(timeout=_POLL_S)
            else:
                gen, number, built, counters, err = self._results.get_nowait()
        except queue.Empty:
            if not block:
                return False
            dead = [p for p in self._workers if not p.is_alive()]
            if dead:
                codes = {p.name: p.exitcode for p in dead}
                self.close()
                raise WorkerError(
                    f"loader worker(s) died: {codes}; a negative code is the signal that "
                    "killed it (-9: out of memory?)"
                ) from None
            return False
        slot = self._slots.pop((gen, number), None)
        if gen != generation:  # a batch of an iteration that was abandoned: its slot is free again
            if slot is not None and self._pool is not None:
                self._pool.release(slot)
            return True
        if err is not None:
            self.close()
            if isinstance(err, PiLoaderError | ValueError | KeyError | IndexError):
                raise err
            raise WorkerError(f"loader worker failed on batch {number}: {err!r}") from err
        pickled, placements, order = built
        shared: dict[str, np.ndarray] = {}
        if slot is not None and self._pool is not None:
            if placements:
                shared = self._pool.arrays(slot, placements)
            else:
                self._pool.release(slot)
        done[number] = ({key: shared[key] if key in shared else pickled[key] for key in order}, counters)
        return True

    def close(self) -> None:
        """Stop the worker processes (they are started again by the next `batches`)."""
        if self._tasks is not None:
            for _ in self._workers:
                with contextlib.suppress(OSError, ValueError):
                    self._tasks.put(None)
        for proc in self._workers:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.terminate()
                proc.join(timeout=5)
        for q in (self._tasks, self._results):
            if q is not None:
                q.cancel_join_thread()
                q.close()
        self._workers, self._tasks, self._results = [], None, None
        if self._image is not None:
            self._image.close()
            self._image = None
        self._episodes = None
        if self._pool is not None:
            self._pool.close()
            self._pool = None
        self._slots.clear()
