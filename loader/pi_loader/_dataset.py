"""`Dataset`: (episode, step) samples of a pinned selection of committed episodes.

Last stage of the data flow: episode ids come from the catalog (SQL), a snapshot or the caller;
per-step arrays are read once at open from the Delta `steps` table (only the files that hold the
selected episodes), frames lazily from `video`. Opening records the Delta version of every table
it reads (`dataset.snapshot`), so the same selection reads the same data later (decision 6).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
from pi_format.layout import LakeLayout

from pi_loader._cache import CacheConfig
from pi_loader._errors import HorizonTooLongError, PiLoaderError, SnapshotError, UnknownCameraError
from pi_loader._lake import (
    EpisodeData,
    Stats,
    TableFiles,
    make_storage,
    pooled_stats,
    read_committed_episodes,
    read_steps,
    resolve_tables,
)
from pi_loader._order import check_seed, sample_order
from pi_loader._snapshot import Snapshot
from pi_loader._spec import SampleSpec
from pi_loader._video import VideoFrames

IMAGE_KEY_PREFIX = "observation.images."
HISTORY_PAD_KEY = "observation.images_is_pad"
# Decoded chunks kept per process: a chunk of 10 frames at 224x224 yuv420p is ~0.75 MB, so 64
# chunks bound a worker's decoded video at ~48 MB while block-shuffled neighbours still hit.
DEFAULT_CHUNK_CACHE = 64
# Episodes whose video rows (encoded bytes, ~0.5-2 MB each) are kept per process.
DEFAULT_EPISODE_CACHE = 32
_STD_FLOOR = 1e-6  # a constant dimension (std 0) normalizes to 0 instead of dividing by zero
# (image key, shape) -> the uint8 array a batch's frames of that key are written into
ImageAllocator = Callable[[str, tuple[int, ...]], np.ndarray]


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
        spec = self._merge_spec(spec, cameras, action_horizon)
        for name, size in (
            ("chunk_cache_size", chunk_cache_size),
            ("episode_cache_size", episode_cache_size),
        ):
            if isinstance(size, bool) or not isinstance(size, int) or size < 1:
                raise ValueError(f"{name} must be an int >= 1, got {size!r}")
        pinned = self._resolve_snapshot(snapshot, catalog, sql, episode_ids)
        self._sql = pinned.sql if pinned is not None else sql
        ids = (
            list(pinned.episode_ids)
            if pinned is not None
            else self._resolve_ids(sql, episode_ids, catalog, sql_parameters)
        )

        self._storage = make_storage(self._layout.root, storage_options, cache)
        files = resolve_tables(
            self._layout, None if pinned is None else pinned.table_versions, storage_options
        )
        self._versions = {name: f.version for name, f in files.items()}
        rows = read_committed_episodes(files["episodes"], self._storage, ids)
        found = rows.column("episode_id").to_pylist() if rows.num_rows else []
        if ids is not None:
            missing = sorted(set(ids) - set(found))
            if missing:
                raise (SnapshotError if pinned is not None else PiLoaderError)(
                    f"{len(missing)} selected episode(s) are not committed in the lake at "
                    f"{self._layout.episodes} (episodes version {self._versions['episodes']}): "
                    f"{missing[:5]}{' ...' if len(missing) > 5 else ''}; is the catalog stale? "
                    "`pilake catalog rebuild` re-derives it from the lake"
                )
        if not found:
            raise PiLoaderError(
                "the selection has no episodes"
                + (f" (sql: {sql})" if sql else f" (lake: {self._layout.root})")
            )
        attempts = rows.column("attempt_id").to_pylist()
        if pinned is not None:
            want = dict(zip(pinned.episode_ids, pinned.attempt_ids, strict=True))
            changed = [e for e, a in zip(found, attempts, strict=True) if want[e] != a]
            if changed:
                raise SnapshotError(
                    f"episodes {changed[:5]} have another committed attempt in the lake at the snapshot's "
                    f"versions than the snapshot records: the snapshot belongs to another lake"
                )
        self._episode_ids: tuple[str, ...] = tuple(found)
        self._attempt_ids: tuple[str, ...] = tuple(attempts)
        self._episode_cameras = tuple(tuple(c) for c in rows.column("cameras").to_pylist())
        self._sizes = tuple(
            zip(rows.column("video_height").to_pylist(), rows.column("video_width").to_pylist(), strict=True)
        )
        steps = read_steps(files["steps"], self._storage, rows)
        self._lengths = steps.lengths
        self._offsets = np.concatenate([[0], np.cumsum(self._lengths)]).astype(np.int64)
        self._proprio = steps.proprio
        self._action = steps.action
        self._stats = {
            "observation.state": pooled_stats(rows, "proprio"),
            "action": pooled_stats(rows, "action"),
        }

        self._spec = spec.with_cameras(self._choose_cameras(spec.cameras))
        self._check_spec()
        # frame index of every step for each chosen camera, in the dataset's camera order
        per_episode = []
        for e, fi in enumerate(steps.frame_index):
            columns = [self._episode_cameras[e].index(c) for c in self._cameras]
            per_episode.append(fi[:, columns] if columns else np.zeros((fi.shape[0], 0), np.int32))
        self._frame_index = np.ascontiguousarray(np.concatenate(per_episode).astype(np.int32, copy=False))
        self._video_files: TableFiles = files["video"]
        self._video = VideoFrames(
            files["video"],
            self._storage,
            self._cameras,
            files["video"].files_by_episode(self._episode_ids),
            chunk_cache_size=chunk_cache_size,
            episode_cache_size=episode_cache_size,
        )
        self._snapshot = Snapshot(
            lake_root=self._layout.root,
            table_versions=self._versions,
            episode_ids=self._episode_ids,
            attempt_ids=self._attempt_ids,
            sql=self._sql,
            **({"created_at_ns": pinned.created_at_ns} if pinned is not None else {}),
        )
        self._order: np.ndarray | None = None

    # -- opening -----------------------------------------------------------------------------

    @staticmethod
    def _merge_spec(
        spec: SampleSpec | None, cameras: Sequence[str] | None, action_horizon: int | None
    ) -> SampleSpec:
        if spec is not None:
            if cameras is not None or action_horizon is not None:
                raise ValueError("pass cameras/action_horizon inside spec=SampleSpec(...), not next to it")
            if not isinstance(spec, SampleSpec):
                raise TypeError(f"spec must be a pi_loader.SampleSpec, got {type(spec).__name__}")
            return spec
        if isinstance(cameras, str):
            raise TypeError("cameras must be a sequence of camera names, got a single str; wrap it in a list")
        kwargs: dict[str, Any] = {}
        if cameras is not None:
            kwargs["cameras"] = tuple(cameras)
        if action_horizon is not None:
            kwargs["action_horizon"] = action_horizon
        return SampleSpec(**kwargs)

    @staticmethod
    def _resolve_snapshot(
        snapshot: Snapshot | str | None,
        catalog: str | None,
        sql: str | None,
        episode_ids: Sequence[str] | None,
    ) -> Snapshot | None:
        if snapshot is None:
            return None
        if sql is not None or episode_ids is not None:
            raise ValueError(
                "pass a snapshot or sql/episode_ids, not both: the snapshot already pins the episodes"
            )
        if isinstance(snapshot, Snapshot):
            return snapshot
        if isinstance(snapshot, str):
            if catalog is None:
                raise ValueError(
                    f"snapshot={snapshot!r} is a name in the catalog: pass catalog=... too, "
                    "or load a file with snapshot=Snapshot.load(path)"
                )
            return Snapshot.from_catalog(catalog, snapshot)
        raise TypeError(f"snapshot must be a Snapshot or a snapshot name, got {type(snapshot).__name__}")

    @staticmethod
    def _resolve_ids(
        sql: str | None,
        episode_ids: Sequence[str] | None,
        catalog: str | None,
        sql_parameters: Mapping[str, object] | None = None,
    ) -> list[str] | None:
        if sql is not None and episode_ids is not None:
            raise ValueError("pass either sql or episode_ids, not both")
        if sql is not None:
            if catalog is None:
                raise ValueError(
                    "catalog is required with sql: pass catalog='/path/to/catalog' (or an http(s) URL), "
                    "e.g. the PILAKE_CATALOG of the installation"
                )
            from pi_catalog import Catalog

            return Catalog(catalog).episode_ids(sql, sql_parameters)
        if episode_ids is not None:
            if isinstance(episode_ids, str):
                raise TypeError("episode_ids must be a sequence of ids, got a single str; wrap it in a list")
            return list(dict.fromkeys(str(e) for e in episode_ids))
        return None

    def _choose_cameras(self, cameras: Sequence[str] | None) -> tuple[str, ...]:
        first = self._episode_cameras[0]
        common = [c for c in first if all(c in cams for cams in self._episode_cameras)]
        if cameras is None:
            if not common:
                raise UnknownCameraError(
                    "the selected episodes share no camera; pass cameras=() for samples without images"
                )
            return tuple(common)
        unknown = [c for c in cameras if c not in common]
        if unknown:
            raise UnknownCameraError(
                f"unknown camera(s) {unknown}: the cameras available in every selected episode are {common}"
            )
        return tuple(cameras)

    def _check_spec(self) -> None:
        spec = self._spec
        shortest = int(np.argmin(self._lengths))
        if spec.action_horizon > self._lengths[shortest]:
            raise HorizonTooLongError(
                f"action_horizon={spec.action_horizon} is longer than episode {self._episode_ids[shortest]} "
                f"({int(self._lengths[shortest])} steps): its samples would be mostly padding. Use a shorter "
                f"horizon or select longer episodes (e.g. SQL `WHERE step_count >= {spec.action_horizon}`)"
            )
        if spec.crop is not None and self._cameras:
            top, left, height, width = spec.crop
            for e, (h, w) in enumerate(self._sizes):
                if top + height > h or left + width > w:
                    raise ValueError(
                        f"crop={spec.crop} (top, left, height, width) does not fit episode "
                        f"{self._episode_ids[e]}'s {h}x{w} (height x width) video"
                    )

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
        return self._episode_ids

    @property
    def cameras(self) -> tuple[str, ...]:
        return self._cameras

    @property
    def _cameras(self) -> tuple[str, ...]:
        cameras = self._spec.cameras
        return cameras if cameras is not None else ()

    @property
    def table_versions(self) -> dict[str, int]:
        """Delta version of each table read ("episodes", "steps", "video")."""
        return dict(self._versions)

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
        return self._sql

    @property
    def episode_lengths(self) -> dict[str, int]:
        return {e: int(n) for e, n in zip(self._episode_ids, self._lengths, strict=True)}

    @property
    def lengths(self) -> np.ndarray:
        """Steps of each selected episode (int64, in `episode_ids` order)."""
        return self._lengths.copy()

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
        return int(self._offsets[-1])

    def __repr__(self) -> str:
        # Stable across processes and runs (Grain keys checkpoints on a data source's repr).
        return (
            f"Dataset(lake={self._layout.root!r}, episodes={len(self._episode_ids)}, samples={len(self)}, "
            f"versions={self._versions}, fingerprint={self._snapshot.fingerprint}, spec={self._spec}, "
            f"seed={self._seed}, epoch={self._epoch})"
        )

    def _permutation(self) -> np.ndarray:
        if self._order is None:
            self._order = sample_order(len(self), seed=self._seed, epoch=self._epoch)
        return self._order

    def locate(self, index: int) -> tuple[str, int]:
        """(episode_id, step) of the `index`-th sample of this epoch's order."""
        e, step = self._split(self._flat(index))
        return self._episode_ids[e], step

    def _flat(self, index: int) -> int:
        i = operator.index(index)
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"sample index {index} out of range for a dataset of {n} samples")
        return int(self._permutation()[i])

    def _split(self, flat: int) -> tuple[int, int]:
        episode = int(np.searchsorted(self._offsets, flat, side="right")) - 1
        return episode, flat - int(self._offsets[episode])

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
        episodes = np.searchsorted(self._offsets, flat, side="right") - 1
        base = self._offsets[episodes]
        steps = flat - base
        spec = self._spec
        batch: dict[str, np.ndarray] = {
            "episode_id": np.array([self._episode_ids[e] for e in episodes], dtype=np.str_),
            "step": steps.astype(np.int32),  # int32: what JAX keeps without x64
        }
        if self._cameras:
            k, stride = spec.frame_history, spec.frame_stride
            wanted_steps = steps[:, None] - stride * np.arange(k, -1, -1)[None, :]  # [B, k+1]
            frames = self._frame_index[base[:, None] + np.maximum(wanted_steps, 0)]  # [B, k+1, C]
            batch.update(self._images(episodes, frames, k > 0, allocate))
            if k:
                batch[HISTORY_PAD_KEY] = wanted_steps < 0
        batch["observation.state"] = self._normalized("observation.state", self._proprio[flat])
        wanted = steps[:, None] + np.arange(spec.action_horizon)[None, :]  # [B, H]
        lengths = self._lengths[episodes][:, None]
        batch["action"] = self._normalized(
            "action", self._action[base[:, None] + np.minimum(wanted, lengths - 1)]
        )
        batch["action_is_pad"] = wanted >= lengths
        return batch

    def _images(
        self, episodes: np.ndarray, frames: np.ndarray, history: bool, allocate: ImageAllocator | None
    ) -> dict[str, np.ndarray]:
        """Per camera, [B, H, W, 3] (or [B, k+1, H, W, 3] with history) frames.

        Samples are visited grouped by episode with every camera at once, so an episode's video
        rows are read at most once per batch even when the episode cache is smaller than the
        batch's episodes (a shuffled batch over a large dataset touches ~B episodes).
        """
        outs: list[np.ndarray | None] = [None] * len(self._cameras)
        for b in np.argsort(episodes, kind="stable"):
            e = int(episodes[b])
            for c, camera in enumerate(self._cameras):
                for j, frame_index in enumerate(frames[b, :, c]):
                    image = self._image(e, camera, int(frame_index))
                    out = outs[c]
                    if out is None:
                        shape = (len(episodes), *((frames.shape[1],) if history else ()), *image.shape)
                        key = IMAGE_KEY_PREFIX + camera
                        out = outs[c] = (
                            np.empty(shape, np.uint8) if allocate is None else allocate(key, shape)
                        )
                    if image.shape != out.shape[-3:]:
                        raise PiLoaderError(
                            f"camera {camera!r}: episode {self._episode_ids[e]} has {image.shape[1]}x"
                            f"{image.shape[0]} frames, others in the batch {out.shape[-2]}x"
                            f"{out.shape[-3]} (width x height); set SampleSpec(resize=(height, width)) "
                            "to batch them"
                        )
                    out[(b, j) if history else b] = image
        images: dict[str, np.ndarray] = {}
        for camera, out in zip(self._cameras, outs, strict=True):
            assert out is not None
            images[IMAGE_KEY_PREFIX + camera] = out
        return images

    def image_shapes(self) -> dict[str, tuple[int, ...]]:
        """Largest shape of one sample's image array per image key: (H, W, 3), or
        (k+1, H, W, 3) with frame history. Frames of a batch share one shape."""
        spec = self._spec
        if spec.resize is not None:
            height, width = spec.resize
        elif spec.crop is not None:
            height, width = spec.crop[2], spec.crop[3]
        else:
            height, width = (max(s[i] for s in self._sizes) for i in (0, 1))
        history = (spec.frame_history + 1,) if spec.frame_history else ()
        return {IMAGE_KEY_PREFIX + c: (*history, height, width, 3) for c in self._cameras}

    def _image(self, e: int, camera: str, frame_index: int) -> np.ndarray:
        rgb = self._video.frame(self._episode_ids[e], self._attempt_ids[e], camera, frame_index)
        spec = self._spec
        if spec.crop is not None:
            top, left, h, w = spec.crop
            rgb = rgb[top : top + h, left : left + w]
        if spec.resize is not None and rgb.shape[:2] != spec.resize:
            rgb = _resize(rgb, spec.resize)
        return rgb

    def _normalized(self, key: str, values: np.ndarray) -> np.ndarray:
        mode = self._spec.normalize
        if mode is None:
            return values.copy()
        stats = self._stats[key]
        if mode == "mean_std":
            out = (values - stats.mean) / np.maximum(stats.std, _STD_FLOOR)
        else:  # min_max onto [-1, 1]
            span = stats.max - stats.min
            out = np.where(span > 0, 2.0 * (values - stats.min) / np.where(span > 0, span, 1.0) - 1.0, 0.0)
        return out.astype(np.float32)

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
        return {"video_reads": self._video.video_reads, "chunk_decodes": self._video.chunk_decodes}

    def episode(self, episode_id: str) -> EpisodeData:
        """The in-memory arrays of one selected episode."""
        try:
            e = self._episode_ids.index(episode_id)
        except ValueError:
            raise KeyError(
                f"episode {episode_id!r} is not in this dataset; it has {len(self._episode_ids)} episodes"
            ) from None
        lo, hi = int(self._offsets[e]), int(self._offsets[e + 1])
        return EpisodeData(
            episode_id=episode_id,
            attempt_id=self._attempt_ids[e],
            cameras=self._episode_cameras[e],
            proprio=self._proprio[lo:hi],
            action=self._action[lo:hi],
            camera_frame_index=self._frame_index[lo:hi],
            video_width=int(self._sizes[e][1]),
            video_height=int(self._sizes[e][0]),
        )


def _resize(rgb: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    try:
        from PIL import Image
    except ImportError as err:
        raise ImportError("SampleSpec.resize needs Pillow: pip install 'pi-lake[loader]'") from err
    height, width = size
    return np.asarray(Image.fromarray(rgb).resize((width, height), Image.Resampling.BILINEAR))


def collate(samples: Sequence[Mapping[str, object]]) -> dict[str, np.ndarray]:
    """Stack samples into a batch: arrays gain a leading batch axis, ids become a str array.

    Example:
        >>> batch = collate([ds.sample(0), ds.sample(1)])
        >>> batch["action"].shape  # (2, action_horizon, A)
    """
    if not samples:
        raise ValueError("cannot collate an empty list of samples")
    out: dict[str, np.ndarray] = {}
    for key in samples[0]:
        values = [s[key] for s in samples]
        if key == "episode_id":
            out[key] = np.array(values, dtype=np.str_)
        elif key == "step":
            out[key] = np.array(values, dtype=np.int32)  # int32: what JAX keeps without x64
        else:
            out[key] = np.stack([np.asarray(v) for v in values])
    return out
