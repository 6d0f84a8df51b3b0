"""`Loader`: sharded, resumable batches of a Dataset, read and decoded by worker processes.

The order of samples is a pure function of (snapshot, seed, epoch, shard index, shard count)
(architecture decision 5): the main process computes it and cuts it into batches, which it
builds itself or has its worker processes build (`_workers`: batch b goes to worker
b % num_workers and comes back in order, so the number of workers changes speed, never the
batches). At most `prefetch_batches` batches are in flight, which with the workers' decoded-
chunk LRUs bounds memory. The state (`get_state`) counts only the batches handed out.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import multiprocessing
import os
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from pi_loader._errors import LoaderStateError
from pi_loader._processes import default_start_method
from pi_loader.decoding import DecoderOptions, FrameDecoder, loader_decoding
from pi_loader.delivery._in_flight import default_num_workers, plan_in_flight
from pi_loader.delivery._shared_batches import shared_memory_available
from pi_loader.delivery._workers import WorkerPool, counter_deltas, read_counters
from pi_loader.order._order import ShardSpec, block_order, check_seed, sample_order, shard_order
from pi_loader.samples._corrupt import check_on_corrupt
from pi_loader.samples._dataset import Dataset
from pi_loader.samples._mixture import Mixture

STATE_FORMAT = "pi_loader.loader_state/1"
# Bytes a sample's non-image arrays take in a batch at most, for the in-flight budget (a
# 50-step action chunk of 32 floats plus state and masks is ~7 kB; ids and steps are small).
_SAMPLE_ARRAY_BYTES = 16 * 2**10


class IdleWorkersWarning(UserWarning):
    """A Loader setting leaves workers with nothing to do (see `LoaderStats.idle_workers`)."""


def _metrics_wanted(port: int | str) -> bool:
    """False for the documented "off" values of a metrics port: 0, "0" and "" (spaces aside);
    anything else is served (and checked by pi_loader.delivery._metrics, which says what is
    wrong with a bad value)."""
    return str(port).strip() not in ("0", "")


def _batch_bytes(dataset: Dataset | Mixture, batch_size: int) -> int:
    images = sum(int(np.prod(shape)) for shape in dataset.image_shapes().values())
    return batch_size * (images + _SAMPLE_ARRAY_BYTES)


@dataclass(frozen=True, slots=True)
class LoaderStats:
    """Counters of what the loader handed out and what its readers did for it.

    `chunk_decodes / samples` is the locality figure: with a global shuffle nearly every sample
    decodes a fresh chunk per camera; block shuffle lowers it towards 1/block_size.
    `bytes_read_per_sample` is the I/O figure, summed over the main process and every worker:
    Parquet footer bytes plus the compressed column chunks of the steps and video row groups
    read (`Dataset.read_stats`); `video_reads` counts video row groups (one chunk each) and
    `steps_reads` steps row groups (part of an episode each), `steps_indexed_reads` of them read
    without a footer through the host's steps index, of `steps_lookups` row groups asked of the
    steps caches. `steps_index_builds` and
    `chunk_index_builds` count the files these processes indexed for this host (once per host
    per file: 0 on a host whose indexes exist).
    `shared_memory_slots` is how many batch-sized shared-memory slots the loader holds now
    (`shared_memory_bytes` in all): about the in-flight depth + 2 when each batch is dropped
    before the next, more while batches are kept. `in_flight_depth` is how many batches the
    workers may have in flight now (it grows up to `in_flight_limit` while the loader waits);
    `idle_workers` is how many of `num_workers` a fixed `prefetch_batches` or the memory budget
    leaves with nothing to do.
    """

    samples: int
    batches: int
    chunk_decodes: int
    video_reads: int
    shared_memory_slots: int = 0
    shared_memory_bytes: int = 0
    steps_reads: int = 0
    footer_reads: int = 0
    bytes_read: int = 0
    steps_indexed_reads: int = 0
    steps_index_builds: int = 0
    chunk_index_builds: int = 0
    steps_lookups: int = 0
    num_workers: int = 0
    in_flight_depth: int = 0
    in_flight_limit: int = 0
    idle_workers: int = 0
    # samples skipped for damaged bytes (Loader(on_corrupt="skip")); not in `samples`
    corrupt_skipped: int = 0
    # object-store reads tried again after a transient error, and reads that hit the deadline
    storage_retries: int = 0
    storage_giveups: int = 0
    # freed heap given back to the OS by the workers (glibc malloc_trim, pi_loader.delivery._heap):
    # trims made, the CPU they took (us), and the anonymous memory they returned (bytes)
    heap_trims: int = 0
    heap_trim_cpu_us: int = 0
    heap_trim_returned_bytes: int = 0
    # seconds the consumer spent blocked in `next()` waiting for a batch (the wait in progress
    # included): its rate over wall time is the fraction of time the trainer was starved
    wait_seconds: float = 0.0

    @property
    def decoded_chunks_per_sample(self) -> float:
        return self.chunk_decodes / self.samples if self.samples else 0.0

    @property
    def bytes_read_per_sample(self) -> float:
        """Bytes read from lake files per sample handed out (footers included).

        Example:
            >>> list(loader); loader.stats().bytes_read_per_sample
            48211.7
        """
        return self.bytes_read / self.samples if self.samples else 0.0


class Loader:
    """Batches (dicts of numpy arrays) of this host's shard of a Dataset, epoch after epoch.

    `iter(loader)` yields the rest of the current epoch from the saved position; when an epoch
    is exhausted the loader moves to the next one (a new permutation). `get_state()` after any
    batch returns a small JSON-serializable dict; `set_state(state)` on a loader over the same
    data (same snapshot) continues with exactly the batches that would have come next, in
    any process.

    Args:
        dataset: the Dataset, or a Mixture of them (its seed, and its epoch as the start epoch,
            are used; a Mixture's order is its own weighted one, sharded the same way).
        batch_size: samples per batch.
        shard: this host's ShardSpec (default: ShardSpec.auto(), from torch.distributed or JAX).
        num_workers: reader/decoder processes; None (default): the host's cores less two
            (`default_num_workers`: 14 on a 16-core host, 1 on a 2-core one); 0 builds batches
            in the calling thread. The order never depends on it.
        prefetch_batches: None (default): batches in flight follow the workers (twice as many
            at first, growing while the loader still waits, up to four per worker) within
            `prefetch_bytes`; an int fixes the depth (a depth below `num_workers` leaves workers
            idle, which is warned about and shown in `stats().idle_workers`).
        prefetch_bytes: memory budget of the batches in flight (None: 2 GiB, or a tenth of
            the host's memory if smaller).
        block_size: None for a global shuffle of all samples each epoch; an int b for block
            shuffle: runs of up to b consecutive steps of one episode are kept together (shuffled
            inside), and the runs are shuffled. Neighbouring steps share video chunks, so block
            shuffle decodes up to ~b x fewer chunks per sample, at the price of batches whose
            samples are correlated (b samples from one episode instead of b episodes). Measure
            it with `stats().decoded_chunks_per_sample`. A Mixture keeps each source's share:
            its runs come from each source's own block-shuffled sequence (`Mixture.epoch_order`).
        drop_last: drop an epoch's last batch when it is short.
        drop_remainder: when the samples do not split evenly into shards: False pads every shard
            to ceil(n / k) samples by repeating the first few (< k) samples of the epoch's
            order; True gives floor(n / k) and skips the rest (different ones each epoch).
        mp_context: multiprocessing start method for workers. None (default): "forkserver"
            where the platform has it, preloaded with numpy, pyarrow, PyAV and pi_loader and
            started when the first Dataset opens (`pi_loader._processes`), so workers are forks
            of a clean process (safe with JAX or CUDA threads in the main process) that start
            in milliseconds; elsewhere "spawn". "fork" is accepted, but not safe once JAX or
            CUDA run threads in the main process.
        shared_memory: with workers, carry images in shared memory (Linux; elsewhere, or with
            False, batches are pickled). The arrays of a batch then live in a slot that is
            reused only once they are all garbage, so keeping batches is safe; it only keeps
            their slots (one batch's bytes each) out of the pool.
        metrics_port: serve Prometheus metrics (samples, prefetch depth, cache hit ratios, bytes
            read; computed only when scraped) on this port; None: the port or 'first-last' range
            in $PILAKE_LOADER_METRICS_PORT, if set, else off. 0 (or "0", "") is off, here and
            in the variable, as for every pi-lake metrics port.
        on_corrupt: a sample whose stored bytes do not match their checksums (architecture
            decision 10): "raise" (default) a CorruptDataError naming the table, file, row
            group and episode; "skip" it: the batch comes without it, the skip is logged and
            counted (`stats().corrupt_skipped`, `pilake_loader_corrupt_skipped_total`). Never a
            wrong sample.
        decoder: "cpu" (default: the workers decode with FFmpeg), "auto" (the CPU unless a
            committed GPU-host measurement says NVDEC wins; the CPU today) or "nvdec", or a
            `pi_loader.decoding.DecoderOptions`, or a decoder made already (`NvdecDecoder`);
            checked here: "nvdec" fails with what is missing where there is no GPU or
            PyNvVideoCodec. With NVDEC the workers read and check the compressed frames and this
            process decodes them on the GPU: image keys come as torch uint8 CUDA tensors of the
            same shapes, the other keys as with the CPU (docs/gpu-decode.md).

    Raises:
        ShardError: a bad shard, or too few samples for the shards.
        ValueError: other bad arguments.

    Example:
        >>> loader = Loader(ds, batch_size=32, shard=ShardSpec(index=0, count=4), num_workers=2)
        >>> for step, batch in enumerate(loader):
        ...     if step == 100:
        ...         json.dump(loader.get_state(), open("state.json", "w"))
        >>> resumed = Loader(ds, batch_size=32, shard=ShardSpec(index=0, count=4), num_workers=2)
        >>> resumed.set_state(json.load(open("state.json")))  # continues at batch 101
    """

    def __init__(
        self,
        dataset: Dataset | Mixture,
        *,
        batch_size: int,
        shard: ShardSpec | None = None,
        shard_index: int | None = None,
        shard_count: int | None = None,
        num_workers: int | None = None,
        prefetch_batches: int | None = None,
        prefetch_bytes: int | None = None,
        block_size: int | None = None,
        drop_last: bool = False,
        drop_remainder: bool = False,
        mp_context: str | None = None,
        shared_memory: bool = True,
        metrics_port: int | None = None,
        on_corrupt: str = "raise",
        decoder: str | DecoderOptions | FrameDecoder = "cpu",
    ) -> None:
        if not isinstance(dataset, Dataset | Mixture):
            raise TypeError(f"dataset must be a pi_loader.Dataset or Mixture, got {type(dataset).__name__}")
        if num_workers is None:
            num_workers = default_num_workers()
        for name, value, low in (
            ("batch_size", batch_size, 1),
            ("num_workers", num_workers, 0),
            ("prefetch_batches", 1 if prefetch_batches is None else prefetch_batches, 1),
            ("prefetch_bytes", 1 if prefetch_bytes is None else prefetch_bytes, 1),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
        if block_size is not None and (
            isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1
        ):
            raise ValueError(f"block_size must be None (global shuffle) or an int >= 1, got {block_size!r}")
        if shard is not None and (shard_index is not None or shard_count is not None):
            raise ValueError("pass shard=ShardSpec(...) or shard_index/shard_count, not both")
        if shard is None:
            if (shard_index is None) != (shard_count is None):
                raise ValueError("pass shard_index and shard_count together")
            shard = (
                ShardSpec.auto()
                if shard_index is None or shard_count is None
                else ShardSpec(index=shard_index, count=shard_count)
            )
        if mp_context is None:
            mp_context = default_start_method()
        if mp_context not in multiprocessing.get_all_start_methods():
            raise ValueError(
                f"mp_context must be one of {multiprocessing.get_all_start_methods()}, got {mp_context!r}"
            )
        if check_on_corrupt(on_corrupt) == "skip":
            if not isinstance(dataset, Dataset):
                raise ValueError(
                    "on_corrupt='skip' takes a Dataset; for a Mixture, make it of datasets that "
                    "skip: Dataset.skipping_corrupt()"
                )
            dataset = dataset.skipping_corrupt()
        self._decoding = loader_decoding(decoder, dataset, batch_size=batch_size)
        self._decoder = self._decoding.kind
        self._dataset = dataset
        self._shard = shard
        self._batch_size = batch_size
        self._num_workers = num_workers
        self._block_size = block_size
        self._drop_last = bool(drop_last)
        self._drop_remainder = bool(drop_remainder)
        self._in_flight = plan_in_flight(
            num_workers=max(num_workers, 1),
            batch_bytes=_batch_bytes(dataset, batch_size),
            prefetch_batches=prefetch_batches,
            prefetch_bytes=prefetch_bytes,
        )
        if num_workers and self._in_flight.idle_workers:
            warnings.warn(f"pi_loader.Loader: {self._in_flight.reason}", IdleWorkersWarning, stacklevel=2)
        self._worker_pool = WorkerPool(
            dataset,
            batch_size=batch_size,
            num_workers=num_workers,
            in_flight=self._in_flight,
            mp_context=mp_context,
            shared_memory=bool(shared_memory) and shared_memory_available() and self._decoding.build is None,
            build=self._decoding.build,
        )
        self._epoch = dataset.epoch
        self._position = 0  # samples of this epoch's shard already handed out
        self._order_cache: tuple[int, np.ndarray] | None = None
        self._samples = 0
        self._batches = 0
        self._wait_s = 0.0  # consumer time spent inside next(), finished waits
        self._waiting_since: float | None = None  # monotonic start of the wait in progress
        self._reads: dict[str, int] = {}  # sums of Dataset.read_stats deltas, all processes
        # shard size is checked now, so a bad shard fails at construction
        self._epoch_order(self._epoch)
        # Metrics only when asked: nothing is imported or counted otherwise (pi_loader.delivery._metrics).
        port = metrics_port if metrics_port is not None else os.environ.get("PILAKE_LOADER_METRICS_PORT")
        if port is not None and _metrics_wanted(port):
            from pi_loader.delivery._metrics import serve_loader_metrics

            serve_loader_metrics(self, port)

    # -- order -----------------------------------------------------------------------------

    def _epoch_order(self, epoch: int) -> np.ndarray:
        if self._order_cache is None or self._order_cache[0] != epoch:
            ds = self._dataset
            if isinstance(ds, Mixture):
                order = ds.epoch_order(epoch, block_size=self._block_size)
            elif self._block_size is None:
                order = sample_order(len(ds), seed=ds.seed, epoch=epoch)
            else:
                order = block_order(ds.lengths, block_size=self._block_size, seed=ds.seed, epoch=epoch)
            mine = shard_order(
                order,
                shard_index=self._shard.index,
                shard_count=self._shard.count,
                drop_remainder=self._drop_remainder,
            )
            self._order_cache = (epoch, mine)
        return self._order_cache[1]

    def epoch_indices(self, epoch: int) -> np.ndarray:
        """Flat sample indices (see `Dataset.sample`) of this shard for `epoch`, in order."""
        return self._epoch_order(check_seed("epoch", epoch)).copy()

    @property
    def samples_per_epoch(self) -> int:
        """Samples this shard yields per epoch (before drop_last)."""
        return len(self._epoch_order(self._epoch))

    @property
    def batches_per_epoch(self) -> int:
        n = self.samples_per_epoch
        return n // self._batch_size if self._drop_last else -(-n // self._batch_size)

    @property
    def epoch(self) -> int:
        return self._epoch

    @property
    def dataset(self) -> Dataset | Mixture:
        return self._dataset

    @property
    def shard(self) -> ShardSpec:
        return self._shard

    @property
    def decoder(self) -> str:
        """The decoder kind the batches are decoded with ("cpu" or "nvdec"; see `decoder`)."""
        return self._decoder

    def set_epoch(self, epoch: int) -> None:
        """Start `epoch` from its beginning at the next iteration."""
        self._epoch = check_seed("epoch", epoch)
        self._position = 0

    # -- state -----------------------------------------------------------------------------

    def agreement_summary(self) -> tuple[str, dict[str, Any]]:
        """(fingerprint, summary) that `pi_loader.agree` compares between hosts: the Dataset's
        plus what makes hosts step together (block size, drop_remainder, shard count, batches
        per epoch, epoch and position; compare at start or right after `set_state`).

        Example:
            >>> fingerprint, summary = loader.agreement_summary()
            >>> summary["kind"]
            'Loader'
        """
        state = self.get_state()
        _, dataset_summary = self.dataset.agreement_summary()
        summary = {
            **dataset_summary,
            "kind": "Loader",
            "dataset_fingerprint": self.dataset.fingerprint,
            "block_size": state["block_size"],
            "drop_remainder": state["drop_remainder"],
            "shard_count": state["shard_count"],
            "batches_per_epoch": self.batches_per_epoch,
            "epoch": state["epoch"],
            "position": state["position"],
        }
        keys = (
            "dataset_fingerprint", "block_size", "drop_remainder", "shard_count", "batches_per_epoch",
            "epoch", "position",
        )  # fmt: skip
        payload = json.dumps({k: summary[k] for k in keys}, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:16], summary

    def get_state(self) -> dict[str, Any]:
        """Where the loader stands: JSON-serializable, small, valid in any process."""
        return {
            "format": STATE_FORMAT,
            # a Dataset's snapshot (states saved before mixtures stay valid), a Mixture's own
            "fingerprint": (
                self._dataset.fingerprint
                if isinstance(self._dataset, Mixture)
                else self._dataset.snapshot.fingerprint
            ),
            "seed": self._dataset.seed,
            "epoch": self._epoch,
            "position": self._position,
            "shard_index": self._shard.index,
            "shard_count": self._shard.count,
            "block_size": self._block_size,
            "drop_remainder": self._drop_remainder,
        }

    def set_state(self, state: dict[str, Any]) -> None:
        """Continue from a `get_state()` taken on a loader over the same data and options.

        Raises:
            LoaderStateError: the state is from other data, seed, sharding or shuffle mode.
        """
        if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
            raise LoaderStateError(f"not a pi_loader loader state (format {STATE_FORMAT!r}): {state!r}")
        mine = self.get_state()
        for key in ("fingerprint", "seed", "shard_index", "shard_count", "block_size", "drop_remainder"):
            if state.get(key) != mine[key]:
                raise LoaderStateError(
                    f"the state's {key}={state.get(key)!r} differs from this loader's {mine[key]!r}: "
                    "it belongs to another dataset snapshot, seed, sharding or shuffle mode"
                )
        epoch, position = state.get("epoch"), state.get("position")
        if not isinstance(epoch, int) or epoch < 0 or not isinstance(position, int) or position < 0:
            raise LoaderStateError(
                f"the state's epoch/position must be ints >= 0, got {epoch!r}/{position!r}"
            )
        if position > len(self._epoch_order(epoch)):
            raise LoaderStateError(
                f"position {position} is past the epoch's {len(self._epoch_order(epoch))} samples"
            )
        self._epoch, self._position = epoch, position

    # Aliases with the names the issue uses.
    state = get_state
    restore = set_state

    def stats(self) -> LoaderStats:
        """What was handed out since construction, and what reading it took (all processes)."""
        pool = self._worker_pool.slot_pool
        reads = self._reads
        return LoaderStats(
            samples=self._samples - reads.get("corrupt_skipped", 0),
            batches=self._batches,
            chunk_decodes=reads.get("chunk_decodes", 0),
            video_reads=reads.get("video_reads", 0),
            shared_memory_slots=0 if pool is None else pool.slot_count,
            shared_memory_bytes=0 if pool is None else pool.slot_count * pool.slot_bytes,
            steps_reads=reads.get("steps_reads", 0),
            footer_reads=reads.get("footer_reads", 0),
            bytes_read=reads.get("bytes_read", 0),
            storage_retries=reads.get("storage_retries", 0),
            storage_giveups=reads.get("storage_giveups", 0),
            steps_indexed_reads=reads.get("steps_indexed_reads", 0),
            steps_index_builds=reads.get("steps_index_builds", 0),
            chunk_index_builds=reads.get("chunk_index_builds", 0),
            steps_lookups=reads.get("steps_lookups", 0),
            num_workers=self._num_workers,
            in_flight_depth=self._worker_pool.depth if self._num_workers else 0,
            in_flight_limit=self._in_flight.maximum if self._num_workers else 0,
            idle_workers=self._in_flight.idle_workers if self._num_workers else 0,
            corrupt_skipped=reads.get("corrupt_skipped", 0),
            heap_trims=reads.get("heap_trims", 0),
            heap_trim_cpu_us=reads.get("heap_trim_cpu_us", 0),
            heap_trim_returned_bytes=reads.get("heap_trim_returned_bytes", 0),
            wait_seconds=self._wait_seconds(),
        )

    def _wait_seconds(self) -> float:
        since = self._waiting_since
        return self._wait_s + (time.monotonic() - since if since is not None else 0.0)

    def _count(self, deltas: dict[str, int]) -> None:
        for key, value in deltas.items():
            self._reads[key] = self._reads.get(key, 0) + value

    # -- iteration -------------------------------------------------------------------------

    def _batches_left(self) -> list[tuple[int, np.ndarray]]:
        order = self._epoch_order(self._epoch)
        out = []
        start = self._position
        while start < len(order):
            indices = order[start : start + self._batch_size]
            if len(indices) < self._batch_size and self._drop_last:
                break
            out.append((start + len(indices), indices))
            start += len(indices)
        return out

    def _advance(self, end: int, size: int) -> None:
        self._position = end
        self._samples += size
        self._batches += 1

    def _finish_epoch(self) -> None:
        self._epoch += 1
        self._position = 0

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        # the consumer waits from each next() call (the generator resuming) to the yield; the
        # time it spends suspended at the yield is the training step's, not counted
        self._waiting_since = since = time.monotonic()
        try:
            for batch in self._iter_batches():
                self._wait_s += time.monotonic() - since
                self._waiting_since = None
                yield batch
                self._waiting_since = since = time.monotonic()
        finally:
            if self._waiting_since is not None:
                self._wait_s += time.monotonic() - self._waiting_since
                self._waiting_since = None

    def _iter_batches(self) -> Iterator[dict[str, np.ndarray]]:
        work = self._batches_left()
        if self._num_workers == 0:
            for end, indices in work:
                before = read_counters(self._dataset)
                build = self._decoding.build
                batch = self._dataset.samples(indices) if build is None else build(self._dataset, indices)
                self._count(counter_deltas(before, read_counters(self._dataset)))
                self._advance(end, len(indices))
                yield batch if build is None else self._decoding.finish(batch)
        else:
            yield from self._iter_workers(work)
        self._finish_epoch()

    def _iter_workers(self, work: list[tuple[int, np.ndarray]]) -> Iterator[dict[str, np.ndarray]]:
        built = self._worker_pool.batches([indices for _, indices in work])
        for (end, indices), (batch, reads) in zip(work, built, strict=True):
            self._count(reads)
            self._advance(end, len(indices))
            yield batch if self._decoding.build is None else self._decoding.finish(batch)

    def close(self) -> None:
        """Stop the worker processes (they are started again by the next iteration)."""
        self._worker_pool.close()

    def __enter__(self) -> Loader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()
