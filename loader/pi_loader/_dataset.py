"""`Dataset`: (episode, step) samples of committed episodes in a seeded, shuffled order.

Last stage of the data flow: episode ids come from the catalog (SQL) or the caller, metadata
and per-step arrays from the Delta `episodes` and `steps` tables, frames lazily from `video`.
The order is a pure function of (data, seed, epoch) (architecture decision 5); the Delta
versions read are recorded in `table_versions`, which snapshots will pin.
"""

from __future__ import annotations

import operator
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
from pi_format.layout import LakeLayout

from pi_loader._errors import PiLoaderError
from pi_loader._lake import (
    EpisodeData,
    pinned_dataset,
    read_committed_episodes,
    read_episode_data,
    table_versions,
)
from pi_loader._order import check_seed, sample_order
from pi_loader._video import VideoFrames

IMAGE_KEY_PREFIX = "observation.images."
# Decoded chunks kept per process: a chunk of 10 frames at 224x224 yuv420p is ~0.75 MB, so the
# default stays small; a shuffled order rarely revisits a chunk soon anyway.
DEFAULT_CHUNK_CACHE = 16
# Episodes whose video rows (encoded bytes) are kept per process, to avoid re-reading Delta.
DEFAULT_EPISODE_CACHE = 32


class Dataset:
    """Samples of (episode, step) from the lake in a seeded shuffled order.

    Picklable and thread-safe: it holds ids, per-step arrays and pinned Delta versions; file
    handles and caches are rebuilt lazily in each process (e.g. each DataLoader worker).

    Args:
        lake: the lake root (a path or URI) or its LakeLayout.
        sql: ClickHouse SQL over the catalog returning an `episode_id` column; needs `catalog`.
        episode_ids: explicit episode ids (exclusive with `sql`). With neither, every committed
            episode of the lake is used.
        catalog: the catalog location (a chdb path or http(s) URL); required with `sql`.
        seed: seed of the order (int >= 0).
        epoch: epoch of the order (int >= 0); `set_epoch` changes it.
        cameras: cameras to return (default: those every selected episode has, in the order
            of the first episode).
        action_horizon: actions per sample, padded at an episode's end by repeating the last.
        chunk_cache_size: decoded video chunks kept per process.
        episode_cache_size: episodes whose encoded video rows are kept per process.

    Raises:
        ValueError: bad arguments, or a camera not every episode has.
        PiLoaderError: the lake lacks tables, ids or steps, or the selection is empty.

    Example:
        >>> ds = Dataset("/data/lake", sql="SELECT episode_id FROM episodes WHERE success",
        ...              catalog="/data/catalog", seed=3)
        >>> sample = ds[0]
        >>> sample["observation.images.front"].shape, sample["action"].shape
        ((224, 224, 3), (16, 7))
    """

    def __init__(
        self,
        lake: str | LakeLayout,
        *,
        sql: str | None = None,
        episode_ids: Sequence[str] | None = None,
        catalog: str | None = None,
        seed: int = 0,
        epoch: int = 0,
        cameras: Sequence[str] | None = None,
        action_horizon: int = 16,
        chunk_cache_size: int = DEFAULT_CHUNK_CACHE,
        episode_cache_size: int = DEFAULT_EPISODE_CACHE,
    ) -> None:
        self._layout = lake if isinstance(lake, LakeLayout) else LakeLayout(str(lake))
        self._seed = check_seed("seed", seed)
        self._epoch = check_seed("epoch", epoch)
        if isinstance(action_horizon, bool) or not isinstance(action_horizon, int) or action_horizon < 1:
            raise ValueError(f"action_horizon must be an int >= 1, got {action_horizon!r}")
        for name, size in (
            ("chunk_cache_size", chunk_cache_size),
            ("episode_cache_size", episode_cache_size),
        ):
            if size < 1:
                raise ValueError(f"{name} must be >= 1, got {size}")
        self._action_horizon = action_horizon
        self._sql = sql
        ids = self._resolve_ids(sql, episode_ids, catalog)

        self._versions = table_versions(self._layout)
        rows = read_committed_episodes(self._layout, self._versions, ids)
        found = set(rows.column("episode_id").to_pylist())
        if ids is not None:
            missing = [e for e in ids if e not in found]
            if missing:
                raise PiLoaderError(
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
        self._episodes: tuple[EpisodeData, ...] = tuple(read_episode_data(self._layout, self._versions, rows))
        self._cameras = self._choose_cameras(cameras)
        # camera -> column in each episode's camera_frame_index
        self._camera_columns = tuple(
            tuple(ep.cameras.index(c) for c in self._cameras) for ep in self._episodes
        )
        lengths = np.array([ep.num_steps for ep in self._episodes], np.int64)
        self._offsets = np.concatenate([[0], np.cumsum(lengths)])
        self._video = VideoFrames(
            pinned_dataset(self._layout, "video", self._versions),
            self._cameras,
            chunk_cache_size=chunk_cache_size,
            episode_cache_size=episode_cache_size,
        )
        self._order: np.ndarray | None = None

    @staticmethod
    def _resolve_ids(
        sql: str | None, episode_ids: Sequence[str] | None, catalog: str | None
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

            return Catalog(catalog).episode_ids(sql)
        if episode_ids is not None:
            if isinstance(episode_ids, str):
                raise TypeError("episode_ids must be a sequence of ids, got a single str; wrap it in a list")
            return list(dict.fromkeys(str(e) for e in episode_ids))
        return None

    def _choose_cameras(self, cameras: Sequence[str] | None) -> tuple[str, ...]:
        common = [c for c in self._episodes[0].cameras if all(c in ep.cameras for ep in self._episodes)]
        if cameras is None:
            if not common:
                raise PiLoaderError("the selected episodes share no camera; pass cameras=[] for no images")
            return tuple(common)
        if isinstance(cameras, str):
            raise TypeError("cameras must be a sequence of camera names, got a single str; wrap it in a list")
        unknown = [c for c in cameras if c not in common]
        if unknown:
            raise ValueError(
                f"unknown camera(s) {unknown}: the cameras available in every selected episode are {common}"
            )
        return tuple(dict.fromkeys(cameras))

    # -- properties ------------------------------------------------------------------------

    @property
    def lake(self) -> LakeLayout:
        return self._layout

    @property
    def episode_ids(self) -> tuple[str, ...]:
        """The selected episodes, sorted (the order samples are numbered in before shuffling)."""
        return tuple(ep.episode_id for ep in self._episodes)

    @property
    def cameras(self) -> tuple[str, ...]:
        return self._cameras

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
        return self._action_horizon

    @property
    def sql(self) -> str | None:
        return self._sql

    @property
    def episode_lengths(self) -> dict[str, int]:
        return {ep.episode_id: ep.num_steps for ep in self._episodes}

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
            f"Dataset(lake={self._layout.root!r}, episodes={len(self._episodes)}, samples={len(self)}, "
            f"versions={self._versions}, cameras={list(self._cameras)}, seed={self._seed}, "
            f"epoch={self._epoch}, action_horizon={self._action_horizon})"
        )

    def _permutation(self) -> np.ndarray:
        if self._order is None:
            self._order = sample_order(len(self), seed=self._seed, epoch=self._epoch)
        return self._order

    def locate(self, index: int) -> tuple[str, int]:
        """(episode_id, step) of the `index`-th sample of this epoch's order."""
        episode, step = self._locate(index)
        return self._episodes[episode].episode_id, step

    def _locate(self, index: int) -> tuple[int, int]:
        i = operator.index(index)
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"sample index {index} out of range for a dataset of {n} samples")
        flat = int(self._permutation()[i])
        episode = int(np.searchsorted(self._offsets, flat, side="right")) - 1
        return episode, flat - int(self._offsets[episode])

    def __getitem__(self, index: int) -> dict[str, object]:
        """The `index`-th sample of this epoch's order.

        Returns a dict: "episode_id" (str), "step" (int), "observation.images.<camera>" (uint8
        [H, W, 3]), "observation.state" (float32 [D]), "action" (float32 [action_horizon, A]:
        the actions from this step on, padded by repeating the episode's last action) and
        "action_is_pad" (bool [action_horizon]).
        """
        e, step = self._locate(index)
        ep = self._episodes[e]
        sample: dict[str, object] = {"episode_id": ep.episode_id, "step": step}
        for camera, column in zip(self._cameras, self._camera_columns[e], strict=True):
            frame_index = int(ep.camera_frame_index[step, column])
            sample[IMAGE_KEY_PREFIX + camera] = self._video.frame(ep, camera, frame_index)
        sample["observation.state"] = ep.proprio[step].copy()
        wanted = np.arange(step, step + self._action_horizon)
        sample["action"] = ep.action[np.minimum(wanted, ep.num_steps - 1)]
        sample["action_is_pad"] = wanted >= ep.num_steps
        return sample

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
        for ep in self._episodes:
            if ep.episode_id == episode_id:
                return ep
        raise KeyError(
            f"episode {episode_id!r} is not in this dataset; it has {len(self._episodes)} episodes"
        )
