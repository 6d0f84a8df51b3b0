"""`Dataset`: (episode, step) samples of a pinned selection of committed episodes.

Last stage of the data flow, in three steps: `_selection` turns SQL over the catalog, ids or a
snapshot into the committed episodes rows and records the Delta version of every table it reads
(`dataset.snapshot`), so the same selection reads the same data later (decision 6); per-step
arrays are read once at open from the Delta `steps` table (only the files that hold the
selected episodes) and numbered by `_sample_index`; `_gather` cuts samples and batches out of
them and out of the frames, which `_video` reads lazily from `video`.
"""

from __future__ import annotations

import operator
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
from pi_format import LakeLayout

from pi_loader._cache import CacheConfig
from pi_loader._gather import ImageAllocator, SampleGather, camera_frame_index
from pi_loader._lake import EpisodeData, Stats, make_storage, pooled_stats, read_steps
from pi_loader._order import check_seed, sample_order
from pi_loader._sample_index import SampleIndex
from pi_loader._selection import (
    check_spec_fits,
    choose_cameras,
    resolve_ids,
    resolve_snapshot,
    select_episodes,
)
from pi_loader._snapshot import Snapshot
from pi_loader._spec import SampleSpec, spec_from_arguments
from pi_loader._video import VideoFrames

# Decoded chunks kept per process: a chunk of 10 frames at 224x224 yuv420p is ~0.75 MB, so 64
# chunks bound a worker's decoded video at ~48 MB while block-shuffled neighbours still hit.
DEFAULT_CHUNK_CACHE = 64
# Episodes whose video rows (encoded bytes, ~0.5-2 MB each) are kept per process.
DEFAULT_EPISODE_CACHE = 32


class Dataset:
    """Samples of (episode, step) from the lake; map-style in a seeded shuffled order.

    Picklable and thread-safe: it holds ids, per-step arrays and the pinned file lists; file
    handles and caches are rebuilt lazily in each process (e.g. each loader worker). Use
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
        cameras, action_horizon: shortcuts for the SampleSpec fields (not with `spec`).
        storage_options: deltalake/object-store options for an s3:// lake.
        cache: a pi_loader.CacheConfig: local disk cache for remote lake files.
        chunk_cache_size: decoded video chunks kept per process (bounds memory).
        episode_cache_size: episodes whose encoded video rows are kept per process.

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
    ) -> None:
        self._layout = lake if isinstance(lake, LakeLayout) else LakeLayout(str(lake))
        self._seed = check_seed("seed", seed)
        self._epoch = check_seed("epoch", epoch)
        spec = spec_from_arguments(spec, cameras, action_horizon)
        for name, size in (
            ("chunk_cache_size", chunk_cache_size),
            ("episode_cache_size", episode_cache_size),
        ):
            if isinstance(size, bool) or not isinstance(size, int) or size < 1:
                raise ValueError(f"{name} must be an int >= 1, got {size!r}")
        pinned = resolve_snapshot(snapshot, catalog, sql, episode_ids)
        ids = (
            list(pinned.episode_ids)
            if pinned is not None
            else resolve_ids(sql, episode_ids, catalog, sql_parameters)
        )

        self._storage = make_storage(self._layout.root, storage_options, cache)
        selection = select_episodes(
            self._layout, self._storage, ids=ids, pinned=pinned, sql=sql, storage_options=storage_options
        )
        self._snapshot = selection.snapshot
        steps = read_steps(selection.files["steps"], self._storage, selection.rows)
        self._index = SampleIndex.from_lengths(steps.lengths)
        self._stats = {
            "observation.state": pooled_stats(selection.rows, "proprio"),
            "action": pooled_stats(selection.rows, "action"),
        }

        self._spec = spec.with_cameras(choose_cameras(selection.episode_cameras, spec.cameras))
        check_spec_fits(self._spec, self.episode_ids, steps.lengths, selection.video_sizes)
        self._video_files = selection.files["video"]
        self._gather = SampleGather(
            spec=self._spec,
            index=self._index,
            episode_ids=self.episode_ids,
            attempt_ids=self._snapshot.attempt_ids,
            episode_cameras=selection.episode_cameras,
            video_sizes=selection.video_sizes,
            proprio=steps.proprio,
            action=steps.action,
            frame_index=camera_frame_index(steps.frame_index, selection.episode_cameras, self.cameras),
            stats=self._stats,
            video=VideoFrames(
                self._video_files,
                self._storage,
                self.cameras,
                self._video_files.files_by_episode(self.episode_ids),
                chunk_cache_size=chunk_cache_size,
                episode_cache_size=episode_cache_size,
            ),
        )
        self._order: np.ndarray | None = None

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
        return self._snapshot

    @property
    def episode_ids(self) -> tuple[str, ...]:
        """The selected episodes, sorted (the order samples are numbered in before shuffling)."""
        return self._snapshot.episode_ids

    @property
    def cameras(self) -> tuple[str, ...]:
        cameras = self._spec.cameras
        return cameras if cameras is not None else ()

    @property
    def table_versions(self) -> dict[str, int]:
        """Delta version of each table read ("episodes", "steps", "video")."""
        return dict(self._snapshot.table_versions)

    @property
    def seed(self) -> int:
        return self._seed

    @property
    def epoch(self) -> int:
        return self._epoch

    @property
    def action_horizon(self) -> int:
        return self._spec.action_horizon

    @property
    def sql(self) -> str | None:
        return self._snapshot.sql

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

    def set_epoch(self, epoch: int) -> None:
        """Switch to another epoch's order (a different permutation of the same samples)."""
        epoch = check_seed("epoch", epoch)
        if epoch != self._epoch:
            self._epoch = epoch
            self._order = None

    # -- access ----------------------------------------------------------------------------

    def __len__(self) -> int:
        return self._index.num_samples

    def __repr__(self) -> str:
        # Stable across processes and runs (Grain keys checkpoints on a data source's repr).
        return (
            f"Dataset(lake={self._layout.root!r}, episodes={len(self.episode_ids)}, samples={len(self)}, "
            f"versions={self._snapshot.table_versions}, fingerprint={self._snapshot.fingerprint}, "
            f"spec={self._spec}, seed={self._seed}, epoch={self._epoch})"
        )

    def _permutation(self) -> np.ndarray:
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
            IndexError: an index out of range. PiLoaderError: frames of one camera that differ
            in size within the batch (set SampleSpec.resize), or video that does not decode.

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
        return self._gather.batch(flat, allocate=allocate)

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
    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_order"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    @property
    def video_stats(self) -> dict[str, int]:
        """Counters of this process: filtered video-table reads and chunk decodes."""
        video = self._gather.video
        return {"video_reads": video.video_reads, "chunk_decodes": video.chunk_decodes}

    def episode(self, episode_id: str) -> EpisodeData:
        """The in-memory arrays of one selected episode."""
        try:
            e = self.episode_ids.index(episode_id)
        except ValueError:
            raise KeyError(
                f"episode {episode_id!r} is not in this dataset; it has {len(self.episode_ids)} episodes"
            ) from None
        return self._gather.episode(e)
