"""Per-step arrays of one episode, read on demand from its steps row group and cached per process.

A sample needs its episode's proprio at one step, the actions of the next `action_horizon` steps
and the camera frame shown at a few steps: all in the one row group the episode's locator names
(`_locators`). Whoever gathers the sample (the main process or a worker) reads that row group
the first time the episode is touched and keeps the parsed arrays in an LRU bounded by a count of
episodes and by bytes, so a process holds what its cache settings allow, whatever the lake's size.

A miss reads the row group without its file's footer when the file has a steps index
(`_steps_index`: built once per host, mapped by every process): one ranged read of the episode's
proprio, action and camera_frame_index column chunks, decoded page by page
(`_parquet_pages`), with the identity, row count and step_index checks taken from the index
(read from the file itself when it was indexed). A file without one (not laid out as the writer
does, or no index configured), or a row group the index does not vouch for, is read through
pyarrow as before: its footer (parsed once per process, LRU-cached) and the one row group.
Both paths give bit-identical arrays.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pi_loader import _steps_index as index
from pi_loader._errors import PiLoaderError, SnapshotDataMissingError
from pi_loader._lake import missing_files_message
from pi_loader._locators import EpisodeLocators
from pi_loader._lru import WeightedLRU
from pi_loader._parquet_pages import PageError, decode_list_chunk
from pi_loader._row_groups import RowGroupReader
from pi_loader._steps_index import StepsIndex, list_field, steps_key

# Bytes between two column chunks read in one ranged read rather than two (pyarrow writes a
# copy of each chunk's ColumnMetaData, ~50 bytes, right after it).
_COALESCE_GAP = 4096
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
        steps_index: the host's steps-file indexes (footer-free reads); None: always pyarrow.

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
        episode_ids: Sequence[str],
        attempt_ids: Sequence[str],
        lengths: np.ndarray,
        camera_counts: np.ndarray,
        version: int,
        max_episodes: int,
        max_bytes: int,
        steps_index: StepsIndex | None = None,
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
        self._steps_index = steps_index
        self._reset()

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._cache: WeightedLRU[int, EpisodeSteps] = WeightedLRU(self._max_bytes, self._max_episodes)
        self.steps_reads = 0  # steps row groups read in this process (either path)
        self.indexed_reads = 0  # of which footer-free, through the steps index

    def __getstate__(self) -> dict[str, Any]:
        state = {name: getattr(self, name) for name in _STATE}
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        for name in _STATE:
            setattr(self, name, state[name])
        self._reset()

    @property
    def steps_index(self) -> StepsIndex | None:
        return self._steps_index

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
        steps = self._indexed(e, uri)
        indexed = steps is not None
        if steps is None:
            rows = self._reader.read(
                uri, int(loc.steps_row_group[e]), STEPS_COLUMNS, table="steps", version=self._version
            )
            steps = self._parse(e, uri, rows)
        with self._lock:
            self.steps_reads += 1
            self.indexed_reads += indexed
            self._cache.put(e, steps, weight=steps.nbytes)
        return steps

    def _indexed(self, e: int, uri: str) -> EpisodeSteps | None:
        """Episode `e`'s steps read through its file's steps index (see the module docstring), or
        None: no index, or a row group the index does not vouch for (the row-group path then
        reads it, and says what is wrong with it).

        Raises:
            PiLoaderError: a column chunk does not parse as the index says (the file changed
                since it was indexed, or is corrupt).
        """
        if self._steps_index is None:
            return None
        path = self._reader.local_path(uri, table="steps", version=self._version)
        try:
            entries = self._steps_index.entries(self._reader, uri, path)
        except FileNotFoundError as err:  # a local lake's file: local_path does not open it
            raise self._missing(uri, err) from err
        group = int(self._locators.steps_row_group[e])
        if not 0 <= group < entries.shape[0]:
            return None  # no index, or a locator that does not fit the file
        entry = entries[group]
        length = int(self._lengths[e])
        widths = [int(entry[list_field(c, index.WIDTH)]) for c in range(len(index.LIST_COLUMNS))]
        if (
            int(entry[index.EXACT]) != 1
            or int(entry[index.KEY]) != steps_key(self._episode_ids[e], self._attempt_ids[e])
            or int(entry[index.ROWS]) != length
            or min(widths) < 1
            or widths[-1] != int(self._camera_counts[e])
        ):
            return None
        spans = [
            (int(entry[list_field(c, index.OFFSET)]), int(entry[list_field(c, index.SIZE)]))
            for c in range(len(index.LIST_COLUMNS))
        ]
        chunks = self._read_spans(uri, path, group, spans)
        arrays = []
        for c, ((name, physical), raw) in enumerate(zip(index.LIST_COLUMNS, chunks, strict=True)):
            try:
                array = decode_list_chunk(
                    raw,
                    codec=int(entry[list_field(c, index.CODEC)]),
                    rows=length,
                    width=widths[c],
                    max_definition=int(entry[list_field(c, index.MAX_DEF)]),
                    dtype=np.dtype("<f4" if physical == "FLOAT" else "<i4"),
                )
            except PageError as err:
                raise PiLoaderError(
                    f"steps file {uri}, row group {group}: the `{name}` column chunk read from the "
                    f"file's steps index ({len(raw)} bytes) is not what the index describes: {err}. The "
                    "file changed since it was indexed, or is corrupt"
                ) from None
            if array is None:
                return None
            arrays.append(array)
        proprio, action, frame_index = arrays
        return EpisodeSteps(
            proprio=proprio.astype(np.float32, copy=False),
            action=action.astype(np.float32, copy=False),
            frame_index=frame_index.astype(np.int32, copy=False),
        )

    def _read_spans(self, uri: str, path: str, group: int, spans: list[tuple[int, int]]) -> list[memoryview]:
        """The column chunks at `spans` ((offset, size) each): one ranged read when they follow
        each other in the file (as the writer lays them out: consecutive columns, apart only by
        the ~50-byte copy of each chunk's metadata pyarrow writes after it, read and counted
        too), else one read each."""
        what = f"steps row group {group}"
        try:
            ordered = sorted(spans)
            if all(0 <= b - (a + n) <= _COALESCE_GAP for (a, n), (b, _) in itertools.pairwise(ordered)):
                start = ordered[0][0]
                total = ordered[-1][0] + ordered[-1][1] - start
                raw = memoryview(self._reader.read_range(uri, path, start, total, what=what))
                return [raw[a - start : a - start + n] for a, n in spans]
            return [memoryview(self._reader.read_range(uri, path, a, n, what=what)) for a, n in spans]
        except FileNotFoundError as err:
            raise self._missing(uri, err) from err

    def _missing(self, uri: str, err: FileNotFoundError) -> SnapshotDataMissingError:
        return SnapshotDataMissingError(missing_files_message("steps", self._version, uri, err))

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
    "_steps_index",
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
