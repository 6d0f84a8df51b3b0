"""Per-step arrays of one episode, read on demand from its steps row group and cached per process.

A sample needs its episode's proprio at one step, the actions of the next `action_horizon` steps
and the camera frame shown at a few steps: all in the one row group the episode's locator names
(`_locators`). Whoever gathers the sample (the main process or a worker) reads that row group
the first time the episode is touched and keeps the parsed arrays in an LRU bounded by a count of
episodes and by bytes, so a process holds what its cache settings allow, whatever the lake's size.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pi_loader._errors import PiLoaderError
from pi_loader._locators import EpisodeLocators
from pi_loader._lru import WeightedLRU
from pi_loader._row_groups import RowGroupReader

STEPS_COLUMNS = ("episode_id", "attempt_id", "step_index", "proprio", "action", "camera_frame_index")


@dataclass(frozen=True, slots=True)
class EpisodeSteps:
    """The per-step arrays of one episode attempt, in step order."""

    proprio: np.ndarray  # float32 [T, D]
    action: np.ndarray  # float32 [T, A]
    frame_index: np.ndarray  # int32 [T, cameras of the episode, in its own order]

    @property
    def nbytes(self) -> int:
        return int(self.proprio.nbytes + self.action.nbytes + self.frame_index.nbytes)


class StepsReader:
    """Reads and caches episodes' steps; thread-safe and picklable (the cache is per process).

    Args:
        reader: reads one row group of a lake file.
        locators: where each episode's steps rows are.
        episode_ids, attempt_ids, lengths, camera_counts: per episode, in index order.
        version: the pinned steps-table version (named in errors about vacuumed files).
        max_episodes, max_bytes: bounds of the cache of parsed episodes.

    Example:
        >>> steps = reader.episode(0)   # one row group read on a miss, none on a hit
        >>> steps.proprio.shape
        (120, 7)
    """

    def __init__(
        self,
        reader: RowGroupReader,
        locators: EpisodeLocators,
        *,
        episode_ids: tuple[str, ...],
        attempt_ids: tuple[str, ...],
        lengths: np.ndarray,
        camera_counts: np.ndarray,
        version: int,
        max_episodes: int,
        max_bytes: int,
    ) -> None:
        self._reader = reader
        self._locators = locators
        self._episode_ids = episode_ids
        self._attempt_ids = attempt_ids
        self._lengths = lengths
        self._camera_counts = camera_counts
        self._version = version
        self._max_episodes = max_episodes
        self._max_bytes = max_bytes
        self._reset()

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._cache: WeightedLRU[int, EpisodeSteps] = WeightedLRU(self._max_bytes, self._max_episodes)
        self.steps_reads = 0  # steps row groups read in this process

    def __getstate__(self) -> dict[str, Any]:
        state = {name: getattr(self, name) for name in _STATE}
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        for name in _STATE:
            setattr(self, name, state[name])
        self._reset()

    def episode(self, e: int) -> EpisodeSteps:
        """The steps of episode number `e` (cached; one row group read on a miss).

        Raises:
            SnapshotDataMissingError: the steps file is gone.
            PiLoaderError: the row group does not hold exactly this episode's steps 0..T-1.
        """
        with self._lock:
            cached = self._cache.get(e)
        if cached is not None:
            return cached
        loc = self._locators
        uri = loc.steps_files[loc.steps_file[e]]
        rows = self._reader.read(
            uri, int(loc.steps_row_group[e]), STEPS_COLUMNS, table="steps", version=self._version
        )
        steps = self._parse(e, uri, rows)
        with self._lock:
            self.steps_reads += 1
            self._cache.put(e, steps, weight=steps.nbytes)
        return steps

    def _parse(self, e: int, uri: str, rows: pa.Table) -> EpisodeSteps:
        eid, attempt, length = self._episode_ids[e], self._attempt_ids[e], int(self._lengths[e])
        group = int(self._locators.steps_row_group[e])
        where = f"episode {eid} (attempt {attempt}): steps row group {group} of {uri}"
        same = pc.and_(pc.equal(rows["episode_id"], eid), pc.equal(rows["attempt_id"], attempt))
        if rows.num_rows != length or not pc.all(same).as_py():
            raise PiLoaderError(
                f"{where} holds {rows.num_rows} rows, not exactly the {length} steps of this attempt "
                "(step_count of its episodes row); the locator does not fit the file"
            )
        index = rows.column("step_index").to_numpy()
        if not np.array_equal(index, np.arange(length)):
            raise PiLoaderError(f"{where}: step_index is not 0..T-1 in order, without gaps or repeats")
        frame_index = _matrix(rows.column("camera_frame_index"), where, "camera_frame_index", np.int32)
        if frame_index.shape[1] != int(self._camera_counts[e]):
            raise PiLoaderError(
                f"{where}: camera_frame_index has {frame_index.shape[1]} entries per step for the "
                f"episode's {int(self._camera_counts[e])} cameras"
            )
        return EpisodeSteps(
            proprio=_matrix(rows.column("proprio"), where, "proprio", np.float32),
            action=_matrix(rows.column("action"), where, "action", np.float32),
            frame_index=frame_index,
        )


_STATE = (
    "_reader",
    "_locators",
    "_episode_ids",
    "_attempt_ids",
    "_lengths",
    "_camera_counts",
    "_version",
    "_max_episodes",
    "_max_bytes",
)


def _matrix(column: pa.ChunkedArray, where: str, what: str, dtype: type) -> np.ndarray:
    """A list column of equal-length lists as a [rows, width] array."""
    lengths = pc.list_value_length(column).to_numpy(zero_copy_only=False)
    rows = len(lengths)
    if rows and (lengths != lengths[0]).any():
        raise PiLoaderError(f"{where}: {what} vectors differ in length across steps")
    width = int(lengths[0]) if rows else 0
    flat = pc.list_flatten(column).to_numpy(zero_copy_only=False)
    return np.ascontiguousarray(flat.astype(dtype, copy=False).reshape(rows, width))
