"""`Dataset`: (episode, step) samples of a pinned selection of committed episodes.

Last stage of the data flow, in three steps: `_selection` turns SQL over the catalog, ids or a
snapshot into the committed episodes rows and records the Delta version of every table it reads
(`dataset.snapshot`), so the same selection reads the same data later (decision 6); samples
are numbered from the rows' step counts (`_sample_index`), and the rows' locators say where each
episode's steps and video are (`_locators`). Opening reads nothing else. `_gather` cuts samples
and batches out of the steps they need (`_steps`: by row group of G steps, cached) and the frames (`_video`:
one row group per chunk, cached) whoever builds the batch reads on demand; every cache is bounded
by configuration, so a process holds what its settings allow, whatever the size of the lake.
"""

from __future__ import annotations

import bisect
import operator
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from pi_format import LakeLayout
from pi_format.stats import NormStats

from pi_loader._errors import CorruptDataError
from pi_loader._processes import warm_forkserver
from pi_loader.order._order import SharedEpoch, check_seed, sample_order
from pi_loader.reading._cache import CacheConfig
from pi_loader.reading._chunk_index import index_directory
from pi_loader.reading._counts import storage_counts
from pi_loader.reading._damage import Unreadable, warn_unreadable
from pi_loader.reading._episodes_rows import segment_directory
from pi_loader.reading._lake import EpisodeData, Stats, make_storage, pooled_stats
from pi_loader.reading._retry import RetryConfig
from pi_loader.reading._row_groups import DEFAULT_FOOTER_CACHE_BYTES
from pi_loader.samples._annotations import SpanValues, read_span_values
from pi_loader.samples._batch_rows import batch_rows, torch_allocator
from pi_loader.samples._corrupt import batch_without_corrupt
from pi_loader.samples._fingerprint import dataset_fingerprint, dataset_summary
from pi_loader.samples._fit import check_spec_fits, choose_cameras
from pi_loader.samples._gather import ImageAllocator
from pi_loader.samples._readers import CacheSizes, build_readers
from pi_loader.samples._sample_index import SampleIndex
from pi_loader.samples._spec import SampleSpec, spec_from_arguments
from pi_loader.selection._events import log_opened
from pi_loader.selection._selection import (
    resolve_ids,
    resolve_snapshot,
    select_episodes,
)
from pi_loader.selection._snapshot import PackedSnapshot, Snapshot

# Chunk decoders kept per process. A shuffled sample almost never finds its chunk here (500
# episodes x 3 cameras x 6 chunks against the cache), while block-shuffled neighbours and frame
# histories need the few chunks of the current steps per camera: 16 serves those. 64 cost ~7% of
# a shuffled sample's CPU against 16 (0.92 vs 0.86 ms, 500-episode real lake, one process:
# every read lands in a fresh buffer instead of one just freed), for no hit.
DEFAULT_CHUNK_CACHE = 16
# Episodes whose per-step arrays are kept per process (also bounded in bytes, below).
DEFAULT_EPISODE_CACHE = 32
# Bytes of per-step arrays kept per process: 3,000 steps x (14 + 14 + 3) x 4 B = 372 kB an
# episode, so 64 MB holds ~170 such episodes; short episodes hit the count bound first.
DEFAULT_STEPS_CACHE_BYTES = 64 * 2**20


class Dataset:
    """Samples of (episode, step) from the lake; map-style in a seeded shuffled order.

    Picklable and thread-safe: it holds per-episode arrays only (ids, step counts, locators of
    the steps and video rows), never per-step ones; steps and frames are read on demand by the
    process that builds a sample, through caches bounded by the arguments below and rebuilt in
    each process (e.g. each loader worker). Use
    `pi_loader.Loader` for sharded, resumable, multi-process batches; `dataset[i]` is the i-th
    sample of this epoch's global (unsharded) order.

    Args:
        lake: the lake root (a path or URI) or its LakeLayout.
        sql: ClickHouse SQL over the catalog returning an `episode_id` column; needs `catalog`.
        sql_parameters: values for `{name:Type}` placeholders in `sql`, bound by ClickHouse
            (never paste user values into `sql`).
        episode_ids: explicit episode ids (exclusive with `sql` and `snapshot`). With none of
            the three, every committed episode of the lake is used.
        snapshot: a `Snapshot` (e.g. `Snapshot.load(path)`), or the name of one stored in
            `catalog`: reads exactly the versions and episodes it pins.
        catalog: the catalog location (a chdb path or http(s) URL); required with `sql` or a
            snapshot name.
        spec: what a sample holds (`SampleSpec`); default SampleSpec().
        seed: seed of the order (int >= 0).
        epoch: epoch of the order (int >= 0); `set_epoch` changes it.
        cameras: shortcut for the SampleSpec field (not with `spec`).
        action_horizon: shortcut for the SampleSpec field (not with `spec`).
        storage_options: deltalake/object-store options for an s3:// lake.
        cache: a pi_loader.CacheConfig: local disk cache for remote lake files (and the
            pinned opens this host made: a pinned snapshot reopens from it, also while the
            store is down).
        retry: a pi_loader.RetryConfig: how reads of an s3:// lake ride out store hiccups
            (default: backoff with jitter, 60 s deadline).
        chunk_cache_size: decoded video chunks kept per process (bounds memory).
        episode_cache_size: episodes' worth of per-step arrays (proprio, actions, frame
            indices) kept per process: up to 4x this many steps row groups (a sample's window
            of steps covers one or two).
        steps_cache_bytes: bytes of per-step arrays kept per process (with episode_cache_size).
        footer_cache_bytes: memory of parsed Parquet footers kept per process (a video file's
            footer grows with its chunks: ~1 MB parsed per 100 chunks).

    Raises:
        ValueError/TypeError: bad arguments.
        UnknownCameraError: a camera not every selected episode has.
        HorizonTooLongError: action_horizon longer than a selected episode.
        SnapshotError / SnapshotDataMissingError: a snapshot that does not fit the lake, or
            whose versions or files are gone.
        PiLoaderError: the lake lacks tables, ids or steps, or the selection is empty.

    Example:
        >>> ds = Dataset("/data/lake", sql="SELECT episode_id FROM episodes WHERE success",
        ...              catalog="/data/catalog", spec=SampleSpec(action_horizon=50), seed=3)
        >>> sample = ds[0]
        >>> sample["observation.images.front"].shape, sample["action"].shape
        ((224, 224, 3), (50, 7))
        >>> ds.snapshot.save("runs/exp1/snapshot.json")
    """

    # What a batch does with a sample whose bytes are damaged ("raise" | "skip": see
    # `skipping_corrupt`), and the samples this process skipped so.
    _on_corrupt: str = "raise"
    _corrupt_skipped: int = 0

    def __init__(
        self,
        lake: str | LakeLayout,
        *,
        sql: str | None = None,
        sql_parameters: Mapping[str, object] | None = None,
        episode_ids: Sequence[str] | None = None,
        snapshot: Snapshot | str | None = None,
        catalog: str | None = None,
        spec: SampleSpec | None = None,
        seed: int = 0,
        epoch: int = 0,
        cameras: Sequence[str] | None = None,
        action_horizon: int | None = None,
        storage_options: Mapping[str, str] | None = None,
        cache: CacheConfig | None = None,
        chunk_cache_size: int = DEFAULT_CHUNK_CACHE,
        episode_cache_size: int = DEFAULT_EPISODE_CACHE,
        steps_cache_bytes: int = DEFAULT_STEPS_CACHE_BYTES,
        footer_cache_bytes: int = DEFAULT_FOOTER_CACHE_BYTES,
        retry: RetryConfig | None = None,
    ) -> None:
        # Loader workers fork from a preloaded server; starting it now overlaps its imports
        # with this open (the first batch waited for both in turn: issue 23).
        warm_forkserver()
        self._layout = lake if isinstance(lake, LakeLayout) else LakeLayout(str(lake))
        self._seed = check_seed("seed", seed)
        self._epoch = check_seed("epoch", epoch)
        self._shared_epoch = SharedEpoch(self._epoch)  # set_epoch reaches pickled copies (workers)
        spec = spec_from_arguments(spec, cameras, action_horizon)
        sizes = CacheSizes(
            chunk_cache_size=chunk_cache_size,
            episode_cache_size=episode_cache_size,
            steps_cache_bytes=steps_cache_bytes,
            footer_cache_bytes=footer_cache_bytes,
        )
        self._storage = make_storage(self._layout.root, storage_options, cache, retry)
        self._storage_options = dict(storage_options) if storage_options else None  # norm_stats()
        # Steps and video chunks are read without footers through per-host indexes of their
        # files (_steps_index, _chunk_index), kept side by side in one directory with this
        # host's copy of the episodes rows (_episodes_rows), its pinned opens and pins.
        indexes = index_directory(self._layout.root, cache)
        pinned = resolve_snapshot(
            snapshot, catalog, sql, episode_ids, self._layout, self._storage, Path(indexes) / "pins"
        )
        ids = (
            list(pinned.episode_ids)
            if pinned is not None
            else resolve_ids(sql, episode_ids, catalog, sql_parameters)
        )
        selection = select_episodes(
            self._layout,
            self._storage,
            ids=ids,
            pinned=pinned,
            sql=sql,
            storage_options=storage_options,
            rows_directory=segment_directory(indexes),
        )
        self._snapshot = selection.snapshot
        self._unreadable = selection.unreadable
        if self._unreadable:  # damage stays local: the open goes on without what it holds
            warn_unreadable(self._unreadable)
        lengths = selection.lengths
        self._index = SampleIndex.from_lengths(lengths)
        self._stats = {
            "observation.state": pooled_stats(selection.rows, "proprio"),
            "action": pooled_stats(selection.rows, "action"),
        }

        self._spec = spec.with_cameras(choose_cameras(selection.episode_cameras, spec.cameras))
        check_spec_fits(self._spec, self.episode_ids, lengths, selection.video_sizes)
        readers = build_readers(
            selection,
            layout=self._layout,
            storage=self._storage,
            spec=self._spec,
            index=self._index,
            stats=self._stats,
            index_directory=indexes,
            sizes=sizes,
        )
        self._gather, self._reader = readers.gather, readers.reader
        self._annotations: SpanValues | None = None
        if self._spec.annotations:
            # as the snapshot saw them: a reopened snapshot or pin gets the same text
            self._annotations = read_span_values(
                self._layout,
                self.episode_ids,
                self._spec.annotations,
                as_of_ns=self._snapshot.created_at_ns,
                storage_options=storage_options,
            )
        self._packed_ids = (readers.episode_ids, readers.attempt_ids)
        self._order: np.ndarray | None = None
        log_opened(self._snapshot)  # JSON event per episode for `pilake trace`; off by default

    # -- properties ------------------------------------------------------------------------

    @property
    def lake(self) -> LakeLayout:
        return self._layout

    @property
    def spec(self) -> SampleSpec:
        """The sample spec, with `cameras` resolved."""
        return self._spec

    @property
    def snapshot(self) -> Snapshot:
        """What this dataset reads, pinned: save it to read the same data later."""
        snapshot = self._snapshot
        if isinstance(snapshot, PackedSnapshot):  # an unpickled copy: unpacked on first use
            snapshot = self._snapshot = snapshot.unpack()
        return snapshot

    @property
    def episode_ids(self) -> tuple[str, ...]:
        """The selected episodes, sorted (the order samples are numbered in before shuffling)."""
        return self.snapshot.episode_ids

    @property
    def cameras(self) -> tuple[str, ...]:
        cameras = self._spec.cameras
        return cameras if cameras is not None else ()

    @property
    def unreadable(self) -> tuple[Unreadable, ...]:
        """The lake files and Delta log entries this open could not read (damaged: see
        `DamagedLakeWarning`), each naming the table, the file, what is wrong and the episodes
        it holds; those episodes are not in this dataset. Empty for an intact lake.

        Example:
            >>> [str(u) for u in Dataset("/data/lake").unreadable]
            []
        """
        return self._unreadable

    @property
    def table_versions(self) -> dict[str, int]:
        """Delta version of each table read ("episodes", "steps", "video")."""
        return dict(self._snapshot.table_versions)

    @property
    def seed(self) -> int:
        return self._seed

    @property
    def epoch(self) -> int:
        self._follow_epoch()
        return self._epoch

    @property
    def action_horizon(self) -> int:
        return self._spec.action_horizon

    @property
    def sql(self) -> str | None:
        return self.snapshot.sql

    @property
    def episode_lengths(self) -> dict[str, int]:
        return {e: int(n) for e, n in zip(self.episode_ids, self._index.lengths, strict=True)}

    @property
    def lengths(self) -> np.ndarray:
        """Steps of each selected episode (int64, in `episode_ids` order)."""
        return self._index.lengths.copy()

    @property
    def stats(self) -> dict[str, Stats]:
        """Statistics of "observation.state" and "action" over the selection (pooled from the
        per-episode statistics in the episodes table); normalization uses these."""
        return dict(self._stats)

    def norm_stats(self) -> dict[str, NormStats]:
        """Normalization statistics of "observation.state" and "action" over every step of
        this dataset's snapshot: count, mean, std (ddof 0), min, max and q01/q99 per dimension
        (`pi_format.stats.NormStats`, float64), merged from the selected episodes rows' exact
        moments and quantile sketches, read once on the first call (then cached; call it before
        making a Loader so workers get the cached copy). Reads no step and no frame: for 10,000
        episodes ~0.3 s to read their rows and ~0.14 s to merge (benchmarks/norm_stats, 2-core
        VM) against 17-31 s for an exact pass over the steps. mean/std merge exactly; q01/q99
        lie within `rank_error_bound` (~0.45% of rank worst case) of the exact ones. Rows written
        before sketches existed give q01 = q99 = None (`require_quantiles()` raises
        MissingSketchError saying how many) and, before float64 moments, `exact=False` (mean
        and std pooled from their float32 mean/std, as `stats`).

        Example:
            >>> action = ds.norm_stats()["action"]
            >>> q01, q99 = action.require_quantiles()
            >>> normalized = 2 * (batch["action"] - q01) / (q99 - q01) - 1
        """
        cached = self.__dict__.get("_norm_stats")
        if cached is None:
            from pi_loader.samples._norm_stats import read_norm_stats

            cached = read_norm_stats(
                self._layout, self._storage, self.snapshot, self.__dict__.get("_storage_options")
            )
            self.__dict__["_norm_stats"] = cached
        return dict(cached)

    def set_epoch(self, epoch: int) -> None:
        """Switch to another epoch's order (a different permutation of the same samples).

        It reaches every copy pickled from this Dataset on this machine, e.g. the persistent
        workers of a torch DataLoader: they read the new epoch at their next sample.

        Example:
            >>> dl = torch.utils.data.DataLoader(ds, batch_size=32, num_workers=4, persistent_workers=True)
            >>> for epoch in range(10):
            ...     ds.set_epoch(epoch)       # before iterating: the workers' next samples follow it
            ...     for batch in dl: ...
        """
        epoch = check_seed("epoch", epoch)
        self._shared_epoch.set(epoch)
        self._follow_epoch()

    def _follow_epoch(self) -> None:
        # The epoch last set by this Dataset or any copy of it (e.g. the main process's).
        shared = self.__dict__.get("_shared_epoch")
        epoch = self._epoch if shared is None else shared.get()
        if epoch != self._epoch:
            self._epoch = epoch
            self._order = None

    # -- hosts that agree (pi_loader.selection._agreement) -------------------------------------------

    @property
    def fingerprint(self) -> str:
        """16 hex digits naming what this dataset yields in which order: sha256 over the
        snapshot's table versions and (episode, attempt) pairs, the resolved sample spec and the
        seed (not the epoch, not the lake's path). Hosts of one run must have equal ones.

        Example:
            >>> a, b = Dataset(lake, snapshot=snap, seed=0), Dataset(other_mount, snapshot=snap, seed=0)
            >>> a.fingerprint == b.fingerprint
            True
        """
        return dataset_fingerprint(self.snapshot, self._spec, self._seed)

    def agreement_summary(self) -> tuple[str, dict[str, Any]]:
        """(fingerprint, summary) that `pi_loader.agree` compares between hosts.

        Example:
            >>> fingerprint, summary = ds.agreement_summary()
            >>> summary["episodes"]
            500
        """
        return self.fingerprint, dataset_summary(self.snapshot, self._spec, self._seed)

    def check_agreement(self, *, backend: str = "auto", group: Any = None) -> str:
        """Check that every host of the run opened this same dataset (see `pi_loader.agree`):
        returns the fingerprint, or raises `HostsDisagreeError` on every host. A collective:
        call it on every host (torch.distributed, or JAX with several processes).

        Example:
            >>> ds = Dataset("/data/lake", snapshot="pick-v3", catalog="/data/catalog", seed=0)
            >>> ds.check_agreement()
        """
        from pi_loader.selection._agreement import agree

        return agree(self, backend=backend, group=group)

    @classmethod
    def shared(
        cls,
        lake: str | LakeLayout,
        *,
        backend: str = "auto",
        group: Any = None,
        check: bool = True,
        **arguments: Any,
    ) -> Dataset:
        """Open one selection on every host of a run: rank 0 opens `Dataset(lake, **arguments)`
        (e.g. with `sql=`) and sends its snapshot to the others, which open exactly that
        snapshot (the rest of `arguments` as given), so a commit landing meanwhile changes
        nothing. Then, with `check`, every host checks the fingerprints (`check_agreement`).
        A collective (torch.distributed or multi-process JAX; one process: a plain open). An
        error opening on any host is raised on every host.

        Example:
            >>> torch.distributed.init_process_group("gloo")
            >>> ds = Dataset.shared("/data/lake", sql="SELECT episode_id FROM episodes WHERE success",
            ...                     catalog="/data/catalog", spec=spec, seed=0)
        """
        from pi_loader.selection._agreement import open_shared

        return open_shared(cls, lake, backend=backend, group=group, check=check, **arguments)

    # -- access ----------------------------------------------------------------------------

    def __len__(self) -> int:
        return self._index.num_samples

    def __repr__(self) -> str:
        # Stable across processes and runs (Grain keys checkpoints on a data source's repr).
        return (
            f"Dataset(lake={self._layout.root!r}, episodes={len(self.episode_ids)}, samples={len(self)}, "
            f"versions={self._snapshot.table_versions}, fingerprint={self.snapshot.fingerprint}, "
            f"spec={self._spec}, seed={self._seed}, epoch={self._epoch})"
        )

    def _permutation(self) -> np.ndarray:
        self._follow_epoch()
        if self._order is None:
            self._order = sample_order(len(self), seed=self._seed, epoch=self._epoch)
        return self._order

    def locate(self, index: int) -> tuple[str, int]:
        """(episode_id, step) of the `index`-th sample of this epoch's order."""
        e, step = self._index.locate(self._flat(index))
        return self.episode_ids[e], step

    def _flat(self, index: int) -> int:
        i = operator.index(index)
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"sample index {index} out of range for a dataset of {n} samples")
        return int(self._permutation()[i])

    def __getitem__(self, index: int) -> dict[str, object]:
        """The `index`-th sample of this epoch's order (see `sample`)."""
        return self.sample(self._flat(index))

    def __getitems__(self, indices: Sequence[int]) -> list[dict[str, object]]:
        """`[self[i] for i in indices]`, built as one batch (`samples`): what a torch
        `DataLoader` with a batch size calls (torch >= 2.1), so its workers read and decode a
        batch at a time instead of a batch of one per sample, and its default collate hands
        that batch out without stacking it again (`pi_loader.samples._batch_rows`; in a worker
        the frames are decoded straight into torch shared memory).

        Example:
            >>> [s["step"] for s in ds.__getitems__([0, 1])] == [ds[0]["step"], ds[1]["step"]]
            True
        """
        flat = [self._flat(i) for i in indices]
        allocator = torch_allocator(_slot_bytes(self, len(flat)))
        if allocator is None:
            return batch_rows(self.samples(flat), {})
        allocate, tensors, slot = allocator
        try:
            batch = self.samples(flat, allocate=allocate)
            # images in the tensors allocated for them (not when damaged samples were skipped
            # and the batch rebuilt in plain arrays)
            shared = {
                key: tensor
                for key, tensor in tensors.items()
                if key in batch and batch[key].__array_interface__["data"][0] == tensor.data_ptr()
            }
            return batch_rows(batch, shared, slot)
        finally:
            if slot is not None:  # from now on only the batch's arrays hold the slot
                slot.end()

    def sample(self, flat_index: int) -> dict[str, object]:
        """Sample number `flat_index` in (episode_id, step) order, before any shuffling.

        Returns a dict: "episode_id" (str), "step" (int), "observation.images.<camera>" (uint8
        [H, W, 3], or [k+1, H, W, 3] with frame history, plus "observation.images_is_pad"
        bool [k+1]), "observation.state" (float32 [D]), "action" (float32 [action_horizon, A]:
        the actions from this step on, padded by repeating the episode's last action) and
        "action_is_pad" (bool [action_horizon]).
        """
        flat = operator.index(flat_index)
        if not 0 <= flat < len(self):
            raise IndexError(
                f"flat sample index {flat_index} out of range for a dataset of {len(self)} samples"
            )
        # One gather path for samples and batches: a sample is row 0 of a batch of one.
        batch = self.samples([flat])
        sample: dict[str, object] = {key: value[0] for key, value in batch.items()}
        sample["episode_id"], sample["step"] = str(batch["episode_id"][0]), int(batch["step"][0])
        return sample

    def samples(
        self, flat_indices: Sequence[int] | np.ndarray, *, allocate: ImageAllocator | None = None
    ) -> dict[str, np.ndarray]:
        """A batch of samples (see `sample`) as arrays; "episode_id" is a str array.

        The same arrays as `collate([sample(i) for i in flat_indices])`, built a batch at a
        time: proprio and actions with one gather, each frame written once into its place.
        `sample` itself is row 0 of a batch of one.
        `allocate(key, shape)` may supply the uint8 array an image key is written into (the
        loader's workers pass shared memory); by default it is a new array.

        Raises:
            IndexError: an index out of range.
            PiLoaderError: frames of one camera that differ in size within the batch (set
                SampleSpec.resize), or video that does not decode.

        Example:
            >>> batch = ds.samples([0, 5, 9])
            >>> batch["action"].shape  # (3, action_horizon, A)
        """
        flat = np.asarray(flat_indices, dtype=np.int64).reshape(-1)
        if flat.size == 0:
            raise ValueError("cannot build a batch of no samples")
        bad = flat[(flat < 0) | (flat >= len(self))]
        if bad.size:
            raise IndexError(
                f"flat sample index {int(bad[0])} out of range for a dataset of {len(self)} samples"
            )
        try:
            batch = self._gather.batch(flat, allocate=allocate)
        except CorruptDataError as err:
            if self._on_corrupt != "skip":
                raise
            # rebuilt in plain arrays: the caller's allocator (shared memory) served the failed
            # attempt; a batch shorter than asked tells it so (delivery._workers)
            batch, flat, skipped = batch_without_corrupt(
                lambda f: self._gather.batch(f, allocate=None), flat, err, len(self)
            )
            self._corrupt_skipped += skipped
        annotations = self.__dict__.get("_annotations")
        if annotations is not None:
            episodes, steps = self._index.locate_many(flat)
            batch.update(annotations.batch(episodes, steps))
        return batch

    def skipping_corrupt(self) -> Dataset:
        """A copy of this dataset whose batches skip samples with damaged bytes instead of
        raising (`Loader(on_corrupt="skip")`; `pi_loader.samples._corrupt`).

        Example:
            >>> ds.skipping_corrupt().samples(range(64))["action"].shape[0]   # <= 64
        """
        import copy

        other = copy.copy(self)
        other._on_corrupt = "skip"
        other._corrupt_skipped = 0
        return other

    def image_shapes(self) -> dict[str, tuple[int, ...]]:
        """Largest shape of one sample's image array per image key: (H, W, 3), or
        (k+1, H, W, 3) with frame history. Frames of a batch share one shape."""
        return self._gather.image_shapes()

    def __iter__(self) -> Iterator[dict[str, object]]:
        """Every sample of this epoch once, in order."""
        for i in range(len(self)):
            yield self[i]

    # Picklable by default (numpy arrays, tuples, VideoFrames drops its caches); keep the
    # cached permutation out so pickles stay small: each process recomputes it (pure function).
    # The snapshot travels packed (its ids are the readers' packed ids: pickled once).
    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_order"] = None
        snapshot = state["_snapshot"]
        if isinstance(snapshot, Snapshot):
            state["_snapshot"] = PackedSnapshot.pack(snapshot, *self._packed_ids)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    @property
    def read_stats(self) -> dict[str, int]:
        """What this process has read to build samples so far (counters since it was made or
        unpickled): "steps_reads" (steps row groups missed in the steps cache: a sample's window
        of steps covers one or two, all of an episode's steps in lakes written before 2026-11-24),
        "steps_lookups" (steps row groups asked of the steps cache: 1 - reads / lookups is its hit
        ratio),
        "video_reads" (video row groups: one per chunk missed in the chunk cache), "chunk_decodes",
        "footer_reads" (Parquet footers parsed), "bytes_read" (footer bytes plus the compressed
        column chunks read), "steps_indexed_reads" (steps_reads made footer-free, through the steps
        index), "steps_index_builds" and "chunk_index_builds" (files of this host indexed by this
        process: at most once per host per file). A `Loader` sums these over its workers:
        `Loader.stats()`, whose `bytes_read_per_sample` is the figure to report.

        Example:
            >>> ds.samples([0, 1, 2]); ds.read_stats["video_reads"]   # <= 3 x cameras
        """
        video, steps, reader = self._gather.video, self._gather.steps, self._reader
        return {
            "steps_reads": steps.steps_reads,
            "steps_lookups": steps.steps_lookups,
            "video_reads": video.video_reads,
            "chunk_decodes": video.chunk_decodes,
            "footer_reads": reader.footer_reads,
            "bytes_read": reader.bytes_read,
            "steps_indexed_reads": steps.indexed_reads,
            "steps_index_builds": 0 if steps.steps_index is None else steps.steps_index.builds,
            "chunk_index_builds": 0 if video.chunk_index is None else video.chunk_index.builds,
            # samples skipped for damaged bytes (on_corrupt="skip")
            "corrupt_skipped": self._corrupt_skipped,
            # object-store hiccups ridden out (or not) and Delta log loads, this process
            **storage_counts(),
        }

    # The name of the same counters before steps were read on demand.
    video_stats = read_stats

    def episode(self, episode_id: str) -> EpisodeData:
        """The per-step arrays of one selected episode, read on demand (its steps row groups).

        Example:
            >>> ds.episode("r1-000001").action.shape   # (T, A)
        """
        ids = self.episode_ids
        e = bisect.bisect_left(ids, episode_id)  # episode_ids are sorted
        if e == len(ids) or ids[e] != episode_id:
            raise KeyError(
                f"episode {episode_id!r} is not in this dataset; it has {len(self.episode_ids)} episodes"
            )
        return self._gather.episode(e)


def _slot_bytes(ds: Dataset, samples: int) -> int:
    """Bytes a torch DataLoader worker's slot holds for a batch of `samples`: its largest images,
    and room for its other arrays (unused room in a slot costs no memory: it is never touched)."""
    per_sample = ds.__dict__.get("_slot_sample_bytes")
    if per_sample is None:  # once per process: image_shapes looks at every episode's size
        images = sum(int(np.prod(shape)) for shape in ds.image_shapes().values())
        per_sample = ds.__dict__["_slot_sample_bytes"] = images + 1024 * (ds.action_horizon + 16)
    return samples * int(per_sample) + (1 << 16)
