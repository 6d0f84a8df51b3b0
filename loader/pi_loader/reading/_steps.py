"""Per-step arrays of episodes, read on demand by steps row group and cached per process.

A sample needs its episode's proprio at one step, the actions of the next `action_horizon` steps
and the camera frame shown at a few steps before: a window of steps, held by one or two of the
row groups the episode's steps are written in (G steps each, G the row count of the first one,
which the episode's locator names; SPEC.md §7.8). Whoever gathers the sample (the main process
or a worker) reads the row groups of the window the first time they are touched and keeps the
parsed arrays in an LRU bounded by a count and by bytes, so a process holds what its cache
settings allow, whatever the lake's size, and a sample of a long episode reads its window, not
the episode.

A miss reads its row groups without the file's footer when the file has a steps index
(`_steps_index`: built once per host, mapped by every process): one ranged read of the groups'
proprio, action and camera_frame_index column chunks, decoded page by page (`_parquet_pages`),
with the identity, row count and step_index checks taken from the index (read from the file
itself when it was indexed). A file without one (not laid out as the writer does, or no index
configured), or a row group the index does not vouch for, is read through pyarrow as before: its
footer (parsed once per process, LRU-cached) and the row group. Both paths give bit-identical
arrays (`_steps_group`: one row group decoded, or checked after pyarrow read it).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pi_loader._errors import CorruptDataError, PiLoaderError, SnapshotDataMissingError
from pi_loader.reading import _steps_index as index
from pi_loader.reading._host_index import IndexRows
from pi_loader.reading._lake import missing_files_message
from pi_loader.reading._locators import EpisodeLocators
from pi_loader.reading._lru import WeightedLRU
from pi_loader.reading._row_groups import RowGroupReader
from pi_loader.reading._steps_group import StepsGroup, decode_group, parse_group
from pi_loader.reading._steps_index import StepsIndex, list_field, steps_key

# Bytes between two column chunks read in one ranged read rather than two (pyarrow writes a
# copy of each chunk's ColumnMetaData, ~50 bytes, right after it).
_COALESCE_GAP = 4096
# Row groups cached per episode of the cache's episode bound (a sample's window covers 1-2).
_GROUPS_PER_EPISODE = 4
STEPS_COLUMNS = ("episode_id", "attempt_id", "step_index", "proprio", "action", "camera_frame_index")


@dataclass(frozen=True, slots=True)
class EpisodeSteps:
    """Per-step arrays of some or all steps of one episode attempt: the row groups (of
    `group_size` steps each, the episode's last one shorter) a read covered, in step order, from
    step `first_step` on. `rows(steps)` gives where steps are in the arrays.

    Example:
        >>> steps = reader.read(0, [(40, 89)])        # row groups 0 and 1 of 64 steps
        >>> steps.proprio[steps.rows(np.array([40, 89]))].shape
        (2, 7)
    """

    proprio: np.ndarray  # float32 [rows, D]
    action: np.ndarray  # float32 [rows, A]
    frame_index: np.ndarray  # int32 [rows, cameras of the episode, in its own order]
    first_step: int
    group_size: int
    # None: the row groups are consecutive; else per row group of the episode its first row
    # here, -1 where not held
    group_row: np.ndarray | None = None

    @property
    def nbytes(self) -> int:
        return int(self.proprio.nbytes + self.action.nbytes + self.frame_index.nbytes)

    def rows(self, steps: np.ndarray) -> np.ndarray:
        """Rows of the arrays holding `steps` (any shape, non-empty).

        Raises:
            ValueError: a step is in a row group this read did not cover.
        """
        if self.group_row is None:
            at = steps - self.first_step
            if (at.astype(np.uint64, copy=False) >= len(self.proprio)).any():  # negatives wrap
                raise ValueError(f"steps {steps} are in row groups this read did not cover")
            return at
        groups = steps // self.group_size
        if groups.min() < 0 or groups.max() >= len(self.group_row):
            raise ValueError(f"steps {steps} are outside the episode's {len(self.group_row)} row groups")
        first = self.group_row[groups]
        if (first < 0).any():
            raise ValueError(f"steps {steps[first < 0]} are in row groups this read did not cover")
        return first + steps % self.group_size


class StepsReader:
    """Reads and caches episodes' steps by row group; thread-safe and picklable (the cache is
    per process).

    An episode's steps are in row groups of G steps each (SPEC.md §7.8; G is the row count of
    its first row group, the one its locator names: one row group of all its steps in lakes
    written before), so a window of steps costs the row groups it covers, not the episode.

    Args:
        reader: reads one row group of a lake file.
        locators: where each episode's steps rows are.
        episode_ids, attempt_ids, lengths, camera_counts: per episode, in index order.
        version: the pinned steps-table version (named in errors about vacuumed files).
        max_episodes, max_bytes: bounds of the cache of parsed row groups (at most
            `_GROUPS_PER_EPISODE` x max_episodes of them, and max_bytes).
        steps_index: the host's steps-file indexes (footer-free reads); None: always pyarrow.
        require_crc: the steps table records page CRCs in every file (`pi_format.lake.integrity`):
            a page without one is damage (CorruptDataError), on either read path.

    Example:
        >>> steps = reader.read(0, [(40, 89)])   # the row groups holding steps 40..89
        >>> steps.group_size, steps.proprio.shape
        (64, (128, 7))
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
        require_crc: bool = False,
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
        self._require_crc = require_crc
        self._reset()

    def _reset(self) -> None:
        self._lock = threading.Lock()
        groups = self._max_episodes * _GROUPS_PER_EPISODE
        # (episode, group of the episode) -> its parsed steps; episode -> its group size G
        self._cache: WeightedLRU[tuple[int, int], StepsGroup] = WeightedLRU(self._max_bytes, groups)
        self._group_sizes: WeightedLRU[int, int] = WeightedLRU(groups)
        self.steps_lookups = 0  # steps row groups asked of the cache in this process
        self.steps_reads = 0  # steps row groups read in this process (either path)
        self.indexed_reads = 0  # of which footer-free, through the steps index
        self._last_vouched: tuple[tuple[int, int], Any, list[int]] | None = None

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
        """All steps of episode number `e` (see `read`)."""
        return self.read(e, [(0, int(self._lengths[e]) - 1)])

    def read(self, e: int, spans: np.ndarray | Sequence[tuple[int, int]]) -> EpisodeSteps:
        """The row groups of episode number `e` that hold the steps of `spans` ((first, last)
        steps, inclusive; [N, 2]), cached per row group; those not cached are read with one ranged
        read.

        Raises:
            SnapshotDataMissingError: the steps file is gone.
            PiLoaderError: a span is outside the episode, or a row group does not hold exactly
                the steps of this attempt it should.
        """
        length = int(self._lengths[e])
        one_span = isinstance(spans, list) and len(spans) == 1
        bounds = np.empty((0, 2), np.int64) if one_span else np.asarray(spans, np.int64).reshape(-1, 2)
        if one_span or len(bounds) == 1:  # the common case (one sample of the episode), in ints
            first, last = (int(x) for x in (spans[0] if one_span else bounds[0]))
            valid = 0 <= first <= last < length
        else:
            first, last = (int(bounds[:, 0].min()), int(bounds[:, 1].max())) if len(bounds) else (0, -1)
            inverted = bool((bounds[:, 0] > bounds[:, 1]).any())
            valid = len(bounds) > 0 and first >= 0 and last < length and not inverted
        if not valid:
            raise PiLoaderError(
                f"steps {np.asarray(spans).tolist()} of episode {self._episode_ids[e]} (attempt "
                f"{self._attempt_ids[e]}) are not spans of its {length} steps (step_count of its "
                "episodes row)"
            )
        try:
            return self._read(e, length, first, last, bounds)
        except CorruptDataError as err:  # named with the episode whose steps it was reading
            raise err.at_episode(self._episode_ids[e], self._attempt_ids[e]) from None

    def _read(self, e: int, length: int, first: int, last: int, bounds: np.ndarray) -> EpisodeSteps:
        size = self._group_size(e)
        count = -(-length // size)
        if len(bounds) <= 1 or first // size == last // size:
            groups = list(range(first // size, last // size + 1))
        else:  # the row groups some span touches: +1 where a span's first is, -1 after its last
            marks = np.zeros(count + 1, np.int64)
            np.add.at(marks, bounds[:, 0] // size, 1)
            np.add.at(marks, bounds[:, 1] // size + 1, -1)
            groups = np.flatnonzero(np.cumsum(marks[:-1]) > 0).tolist()
        with self._lock:
            cached = {g: self._cache.get((e, g)) for g in groups}
            self.steps_lookups += len(groups)
        have = {g: group for g, group in cached.items() if group is not None}
        if len(have) < len(groups):
            read, indexed = self._read_groups(e, size, [g for g in groups if g not in have])
            with self._lock:
                self.steps_reads += len(read)
                self.indexed_reads += indexed
                for g, group in read.items():
                    self._cache.put((e, g), group, weight=group.nbytes)
            have.update(read)
        parts = [have[g] for g in groups]
        group_row = None
        if groups[-1] - groups[0] != len(groups) - 1:  # not consecutive: where each group starts
            group_row = np.full(count, -1, np.int64)
            row = 0
            for g, part in zip(groups, parts, strict=True):
                group_row[g] = row
                row += len(part.proprio)
        one = len(parts) == 1
        return EpisodeSteps(
            proprio=parts[0].proprio if one else np.concatenate([p.proprio for p in parts]),
            action=parts[0].action if one else np.concatenate([p.action for p in parts]),
            frame_index=parts[0].frame_index if one else np.concatenate([p.frame_index for p in parts]),
            first_step=groups[0] * size,
            group_size=size,
            group_row=group_row,
        )

    def _group_size(self, e: int) -> int:
        """G of episode `e`: the row count of its first row group (the index's, when it vouches
        for that row group; else the footer's)."""
        with self._lock:
            size = self._group_sizes.get(e)
        if size is not None:
            return size
        loc = self._locators
        uri = loc.steps_files[loc.steps_file[e]]
        first = int(loc.steps_row_group[e])
        entries, path = self._index_entries(uri)
        entry = self._vouched(e, entries, first)
        if entry is not None and entry[index.START] == 0:
            size = entry[index.ROWS]
        else:
            try:
                metadata = self._reader.footer(uri, path, keep=True)
            except FileNotFoundError as err:
                raise self._missing(uri, err) from err
            if not 0 <= first < metadata.num_row_groups:
                raise PiLoaderError(
                    f"steps file {uri} has {metadata.num_row_groups} row groups, the locator of episode "
                    f"{self._episode_ids[e]} names row group {first}: the episodes row does not fit the "
                    "file (was the file rewritten without updating the locators?)"
                )
            size = int(metadata.row_group(first).num_rows)
            if size < 1:
                raise PiLoaderError(
                    f"steps file {uri}, row group {first} (the first of episode {self._episode_ids[e]}) "
                    "is empty; the locator does not fit the file"
                )
        with self._lock:
            self._group_sizes.put(e, size)
        return size

    def _index_entries(self, uri: str) -> tuple[np.ndarray | IndexRows | None, str]:
        """The steps index of `uri` (None without an index configured) and its local path."""
        path = self._reader.local_path(uri, table="steps", version=self._version)
        if self._steps_index is None:
            return None, path
        try:
            return self._steps_index.entries(self._reader, uri, path), path
        except FileNotFoundError as err:  # a local lake's file: local_path does not open it
            raise self._missing(uri, err) from err

    def _vouched(self, e: int, entries: np.ndarray | IndexRows | None, group: int) -> list[int] | None:
        """The index's row of row group `group` when it vouches for it as a part of episode `e`
        (EXACT, this attempt's key, uniform list widths, the episode's camera count); None
        otherwise (no index, or not such a row group). The last answer is kept: a miss asks for
        the episode's first row group twice (its group size, then its rows)."""
        if entries is None or not 0 <= group < entries.shape[0]:
            return None
        last = self._last_vouched
        if last is not None and last[0] == (e, group) and last[1] is entries:
            return last[2]
        entry: list[int] = np.asarray(entries[group]).tolist()
        widths = [entry[list_field(c, index.WIDTH)] for c in range(len(index.LIST_COLUMNS))]
        if (
            entry[index.EXACT] != 1
            or min(widths) < 1
            or widths[-1] != int(self._camera_counts[e])
            or entry[index.KEY] != steps_key(self._episode_ids[e], self._attempt_ids[e])
        ):
            return None
        self._last_vouched = ((e, group), entries, entry)
        return entry

    def _read_groups(self, e: int, size: int, groups: list[int]) -> tuple[dict[int, StepsGroup], int]:
        """Groups `groups` (of the episode's, 0-based) of episode `e`, and how many of them were
        read footer-free: those the index vouches for with one ranged read, the rest through
        pyarrow one row group each (which says what is wrong with them)."""
        loc = self._locators
        uri = loc.steps_files[loc.steps_file[e]]
        first, length = int(loc.steps_row_group[e]), int(self._lengths[e])
        out: dict[int, StepsGroup] = {}
        indexed = self._indexed(e, uri, size, groups)
        for g in groups:
            steps = indexed.get(g)
            if steps is None:
                start = g * size
                rows = self._reader.read(uri, first + g, STEPS_COLUMNS, table="steps", version=self._version)
                if self._require_crc:  # pyarrow reads a page without a CRC unverified
                    self._reader.check_crcs_present(uri, first + g, STEPS_COLUMNS, table="steps")
                steps = parse_group(
                    rows,
                    f"episode {self._episode_ids[e]} (attempt {self._attempt_ids[e]}): steps row group "
                    f"{first + g} of {uri}",
                    identity=(self._episode_ids[e], self._attempt_ids[e]),
                    steps=(start, min(size, length - start), length),
                    cameras=int(self._camera_counts[e]),
                )
            out[g] = steps
        return out, len(indexed)

    def _indexed(self, e: int, uri: str, size: int, groups: list[int]) -> dict[int, StepsGroup]:
        """The groups of `groups` the file's steps index vouches for (see the module docstring),
        read with one ranged read and decoded; the others are left to the row-group path.

        Raises:
            PiLoaderError: a column chunk does not parse as the index says (the file changed
                since it was indexed, or is corrupt).
        """
        if self._steps_index is None:
            return {}
        index_rows, path = self._index_entries(uri)
        first, length = int(self._locators.steps_row_group[e]), int(self._lengths[e])
        entries: dict[int, list[int]] = {}
        for g in groups:
            entry = self._vouched(e, index_rows, first + g)
            start = g * size
            rows = min(size, length - start)
            if entry is not None and entry[index.START] == start and entry[index.ROWS] == rows:
                entries[g] = entry
        if not entries:
            return {}
        columns = len(index.LIST_COLUMNS)
        spans = [
            (entry[list_field(c, index.OFFSET)], entry[list_field(c, index.SIZE)])
            for entry in entries.values()
            for c in range(columns)
        ]
        chunks = self._read_spans(uri, path, first + min(entries), spans)
        out: dict[int, StepsGroup] = {}
        for i, (g, entry) in enumerate(entries.items()):
            group = decode_group(
                uri, first + g, entry, chunks[i * columns : (i + 1) * columns], require_crc=self._require_crc
            )
            if group is not None:
                out[g] = group
        return out

    def _read_spans(self, uri: str, path: str, group: int, spans: list[tuple[int, int]]) -> list[memoryview]:
        """The column chunks at `spans` ((offset, size) each): one ranged read when they follow
        each other in the file (as the writer lays them out: consecutive columns, apart only by
        the ~50-byte copy of each chunk's metadata pyarrow writes after it and, between row
        groups, the small identity columns, all read and counted too), else one read each."""
        what = f"steps row group {group}" + (f" and {len(spans) // 3 - 1} after it" if len(spans) > 3 else "")
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
    "_require_crc",
)
