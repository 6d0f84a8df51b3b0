"""A loader worker gets each batch's per-episode rows with its task, never the whole selection's.

A Dataset's per-episode arrays (sample index, locators, packed ids, video sizes, camera lists:
~117 bytes per selected episode, 117 MB at 1,000,000 episodes) were shared with the workers as one
mapped file (`_shared_dataset`): no private copy, but every page a worker touches counts in its
RSS, and shuffled samples over a million episodes touch every page within a few dozen batches
(worker peak RSS 2.15x the 1,000-episode lake's: benchmarks/baselines/worker_memory.json).

Instead, the main process pickles the worker's Dataset with each of those arrays replaced by a
persistent id (`EpisodeTable.persistent_id`), and with each task sends the rows of the batch's
episodes only (`EpisodeTable.rows`: numpy fancy indexing, a few dozen microseconds a batch, no
Python per sample). In the worker the arrays are proxies (`_Column`, `_Packed`, `_Index`) that
answer for the episodes of the batch being built (`BatchEpisodes.install`), by the same global
episode numbers, so the readers' caches (keyed by episode number) and the batch's content are
unchanged; asking for an episode outside the batch raises `PiLoaderError`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from pi_loader._errors import PiLoaderError
from pi_loader.delivery._rows_layout import RowsPlan
from pi_loader.reading._packed import PackedStrings

# The file URIs of `EpisodeLocators` (one per distinct file: ~1.6 MB of Python strings in every
# worker at 1,000,000 episodes in ~9,400 files) and the column numbering them per episode.
_LOCATOR_FILES = (("steps_files", "steps_file"), ("video_files", "video_file"))
# Locator fields of `EpisodeLocators` that hold one row per episode.
_LOCATOR_FIELDS = (
    "steps_file",
    "steps_row_group",
    "video_file",
    "video_row_group",
    "camera_column",
    "chunk_frames",
)


@dataclass(frozen=True, slots=True)
class EpisodeRows:
    """What a task carries: the rows of a batch's episodes, in one buffer (one pickled object
    instead of ~20 arrays: ~100 -> ~50 us of the main process's CPU a batch of 32).

    `data` holds, each at its natural alignment (widest items first): the batch's episodes
    (int64, sorted, unique), the flat sample number of each one's step 0 (int64), the rows of
    every column of `layout` at those episodes, and per packed name its offsets (int64 [U+1]) and
    then its UTF-8 bytes, whose lengths `text_bytes` gives.
    """

    count: int  # U: the batch's distinct episodes
    layout: tuple[tuple[str, str, tuple[int, ...]], ...]  # (name, dtype, shape after U) per part
    text_bytes: tuple[int, ...]  # bytes of each packed name's strings
    data: bytes


class EpisodeTable:
    """The main process's side: which objects of a Dataset are per-episode, and their rows per batch.

    Example:
        >>> table = EpisodeTable(ds)
        >>> image = SharedDatasetImage(ds, episodes=table)   # the worker's copy holds proxies
        >>> rows = table.rows(np.array([0, 17, 4]))          # sent with the batch's task
    """

    def __init__(self, dataset: Any) -> None:
        index = dataset._index
        gather = dataset._gather
        locators = gather._locators
        self._index = index
        self._episodes = len(index.lengths)
        columns: list[tuple[str, Any]] = [
            ("lengths", index.lengths),
            ("video_sizes", gather._sizes),
            ("steps.lengths", gather.steps._lengths),
            ("steps.camera_counts", gather.steps._camera_counts),
        ]
        cameras = gather._episode_cameras
        if hasattr(cameras, "indices"):  # CameraLists: its per-episode index
            columns.append(("camera_lists", cameras.indices))
        columns += [(f"locators.{name}", getattr(locators, name)) for name in _LOCATOR_FIELDS]
        packed: list[tuple[str, Any]] = [
            ("episode_ids", gather._episode_ids),
            ("attempt_ids", gather._attempt_ids),
            ("steps.episode_ids", gather.steps._episode_ids),
            ("steps.attempt_ids", gather.steps._attempt_ids),
            ("video.episode_ids", gather.video._episode_ids),
            ("video.attempt_ids", gather.video._attempt_ids),
        ]
        self._order: list[int] | None = None
        self._layout: tuple[tuple[str, str, tuple[int, ...]], ...] = ()
        self._ids: dict[int, tuple[Any, ...]] = {id(index): ("index", index.num_samples, self._episodes)}
        self._columns: dict[str, np.ndarray] = {}
        self._packed: dict[str, PackedStrings] = {}
        for name, array in columns:
            if id(array) in self._ids:  # the same array under two names: sent once
                continue
            if not isinstance(array, np.ndarray) or len(array) != self._episodes:
                raise PiLoaderError(
                    f"per-episode array {name} is {type(array).__name__}, not one row an episode"
                )
            self._ids[id(array)] = ("column", name, self._episodes)
            self._columns[name] = array
        for name, strings in packed:
            if id(strings) in self._ids:
                continue
            if not isinstance(strings, PackedStrings) or len(strings) != self._episodes:
                raise PiLoaderError(
                    f"per-episode ids {name} are {type(strings).__name__}, not packed strings"
                )
            self._ids[id(strings)] = ("packed", name, self._episodes)
            self._packed[name] = strings
        self._column_at = {name: i for i, name in enumerate(self._columns)}
        # each episode's file URI, sent like its ids; the worker's stand-in for the tuple answers
        # by file number for the files of the batch's episodes
        self._files: dict[str, tuple[str, np.ndarray]] = {}
        for files, column in _LOCATOR_FILES:
            uris = getattr(locators, files)
            if uris and id(uris) not in self._ids and f"locators.{column}" in self._columns:
                name = f"locators.{files}"
                self._ids[id(uris)] = ("files", name, len(uris))
                # fixed-width UTF-8 (a few hundred kB): a batch's URIs are one fancy index
                self._files[name] = (f"locators.{column}", np.array([u.encode() for u in uris], np.bytes_))

    def persistent_id(self, obj: Any) -> tuple[Any, ...] | None:
        """The tag a pickle writes instead of `obj` when it is per-episode (else None)."""
        return self._ids.get(id(obj))

    def rows(self, flat: np.ndarray) -> EpisodeRows:
        """The per-episode rows a worker needs to build the batch of flat samples `flat` (in range)."""
        flat = np.asarray(flat, dtype=np.int64).reshape(-1)
        episodes, _ = self._index.locate_many(flat)
        keys = np.unique(episodes).astype(np.int64, copy=False)
        parts = [keys, self._index.offsets[keys].astype(np.int64, copy=False)]
        parts += [array[keys] for array in self._columns.values()]
        texts = [_packed_rows(strings, keys) for strings in self._packed.values()]
        parts += [offsets for offsets, _ in texts]
        parts += [uris[parts[2 + self._column_at[col]]] for col, uris in self._files.values()]
        order = self._order
        if order is None:  # the parts' order by item size (widest first), once
            layout = [("keys", "int64", ()), ("offsets", "int64", ())]
            layout += [(f"column:{n}", a.dtype.str, a.shape[1:]) for n, a in self._columns.items()]
            layout += [(f"packed:{n}", "<i8", ()) for n in self._packed]
            layout += [(f"files:{n}", uris.dtype.str, ()) for n, (_, uris) in self._files.items()]
            # widest alignment first: every part starts aligned
            order = self._order = sorted(range(len(layout)), key=lambda i: -np.dtype(layout[i][1]).alignment)
            self._layout = tuple(layout[i] for i in order)
        data = b"".join([*(parts[i].tobytes() for i in order), *(t.tobytes() for _, t in texts)])
        return EpisodeRows(
            count=len(keys), layout=self._layout, text_bytes=tuple(len(t) for _, t in texts), data=data
        )


def _packed_rows(strings: PackedStrings, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, bytes) of the strings at `keys`, gathered with numpy (no Python per string)."""
    offsets = strings._offsets
    starts = offsets[keys].astype(np.int64)
    sizes = offsets[keys + 1].astype(np.int64) - starts
    out = np.zeros(len(keys) + 1, np.int64)
    np.cumsum(sizes, out=out[1:])
    positions = np.repeat(starts - out[:-1], sizes) + np.arange(int(out[-1]), dtype=np.int64)
    return out, strings._data[positions]


class BatchEpisodes:
    """The worker's side: the rows of the batch being built, which the proxies read.

    Example:
        >>> episodes = BatchEpisodes()
        >>> dataset = unpickle(payload, persistent_load=episodes.proxy)
        >>> episodes.install(rows); dataset.samples(indices)
    """

    def __init__(self) -> None:
        self.keys = np.zeros(0, np.int64)
        self.offsets = np.zeros(0, np.int64)
        self.ends = np.zeros(0, np.int64)
        self.columns: dict[str, np.ndarray] = {}
        self.packed: dict[str, PackedStrings] = {}
        self.files: dict[str, np.ndarray] = {}
        self._position: dict[int, int] = {}
        self._file_position: dict[str, dict[int, int]] = {}
        self._uris: dict[tuple[str, Any], str] = {}  # URIs decoded for the installed batch
        # the last layout's parse (every task of a loader carries the same layout)
        self._plan: tuple[Any, RowsPlan] | None = None

    def install(self, rows: EpisodeRows) -> None:
        """Serve `rows` from now on (the episodes of the next batch): views of its buffer.

        Raises:
            PiLoaderError: rows whose buffer does not fit their layout (nothing installed).
        """
        try:
            self._install(rows)
        except (ValueError, TypeError, StopIteration) as err:
            raise PiLoaderError(
                f"episode rows of a loader task do not fit their layout ({err}); the main process and "
                "this worker run different pi_loader code?"
            ) from None

    def _install(self, rows: EpisodeRows) -> None:
        count, data, at = rows.count, rows.data, 0
        cached = self._plan
        if cached is not None and cached[0] == rows.layout:
            plan = cached[1]
        else:
            plan = RowsPlan.of(rows.layout)
            self._plan = (rows.layout, plan)
        parts: list[np.ndarray] = []
        for dtype, per_row, extra, shape in plan.parts:
            part = np.frombuffer(data, dtype, count * per_row + extra, at)
            parts.append(part.reshape(count, *shape) if shape else part)
            at += part.nbytes
        packed: dict[str, PackedStrings] = {}
        for (name, i), size in zip(plan.packed, rows.text_bytes, strict=True):
            packed[name] = PackedStrings(parts[i], np.frombuffer(data, np.uint8, size, at))
            at += size
        if at != len(data):
            raise ValueError(f"{len(data)} bytes, {at} expected")
        keys, offsets = parts[plan.keys], parts[plan.offsets]
        ends = offsets + parts[plan.lengths] if plan.lengths >= 0 else offsets
        if (np.diff(keys) <= 0).any() or (ends < offsets).any():
            raise ValueError("episodes not sorted and distinct, or negative lengths")
        self.keys, self.offsets = keys, offsets
        self.columns = {name: parts[i] for name, i in plan.columns}
        self.packed = packed
        self.files = {name: parts[i] for name, i in plan.files}
        self._file_position = {}
        self._uris = {}
        self.ends = ends
        self._position = dict(zip(keys.tolist(), range(count), strict=True))

    def where(self, key: Any) -> Any:
        """Row(s) of the installed arrays holding global episode number(s) `key`."""
        if isinstance(key, np.ndarray | list):
            episodes = np.asarray(key)
            at = np.searchsorted(self.keys, episodes)
            bad = (at >= len(self.keys)) | (self.keys[np.minimum(at, len(self.keys) - 1)] != episodes)
            if len(self.keys) == 0 or bad.any():
                raise self._outside(episodes[bad][0] if bad.any() else episodes.reshape(-1)[0])
            return at
        try:
            return self._position[key]
        except (KeyError, TypeError):
            raise self._outside(key) from None

    def file(self, name: str, column: str, number: Any) -> str:
        """The URI of file `number` of the tuple `name` (numbered per episode by `column`)."""
        try:
            return self._uris[name, number]  # decoded by an earlier call for this batch
        except (KeyError, TypeError):
            pass
        where = self._file_position.get(name)
        if where is None:
            numbers = self.columns[column].tolist()
            where = self._file_position[name] = {n: i for i, n in reversed(list(enumerate(numbers)))}
        try:
            uri = self._uris[name, number] = str(self.files[name][where[number]].decode())
            return uri
        except (KeyError, TypeError, UnicodeDecodeError):
            raise PiLoaderError(
                f"file {number!r} of {name} is not one of the files of the batch this loader worker is "
                "building (pi_loader.delivery._batch_episodes)"
            ) from None

    def _outside(self, key: Any) -> PiLoaderError:
        return PiLoaderError(
            f"episode {key!r} is not among the {len(self.keys)} episodes of the batch this loader "
            "worker is building: a worker holds the per-episode rows of its batch only "
            "(pi_loader.delivery._batch_episodes)"
        )

    def proxy(self, tag: Any) -> Any:
        """`persistent_load` for the worker's unpickler: the stand-in for a tagged object."""
        kind = tag[0]
        if kind == "column":
            return _Column(self, tag[1], tag[2])
        if kind == "packed":
            return _Packed(self, tag[1], tag[2])
        if kind == "index":
            return _Index(self, tag[1], tag[2])
        if kind == "files":
            return _Files(self, tag[1], tag[2])
        raise PiLoaderError(f"unknown per-episode tag {tag!r} in the dataset a loader worker loads")


class _Absent:
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise PiLoaderError(
            f"{type(self).__name__}.{name}: a loader worker holds the per-episode rows of its batch "
            "only, not the whole selection's (pi_loader.delivery._batch_episodes)"
        )


class _Column(_Absent):
    """A per-episode array, indexed by global episode number(s) of the installed batch."""

    def __init__(self, episodes: BatchEpisodes, name: str, count: int) -> None:
        self._episodes, self._name, self._count = episodes, name, count

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, key: Any) -> Any:
        episodes = self._episodes
        # the per-frame path: one episode (and a camera), a dict lookup (no call of `where`)
        try:
            if type(key) is tuple:
                return episodes.columns[self._name][(episodes._position[key[0]], *key[1:])]
            return episodes.columns[self._name][episodes._position[key]]
        except (KeyError, TypeError, IndexError):
            pass  # arrays, lists, an episode outside the batch: worded below
        if isinstance(key, tuple):
            at = episodes.where(key[0])
            return episodes.columns[self._name][(at, *key[1:])]
        at = episodes.where(key)
        return episodes.columns[self._name][at]


class _Packed(_Absent):
    """Packed per-episode strings (episode or attempt ids) of the installed batch."""

    def __init__(self, episodes: BatchEpisodes, name: str, count: int) -> None:
        self._episodes, self._name, self._count = episodes, name, count

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, key: Any) -> str:
        episodes = self._episodes
        at = episodes._position.get(key) if type(key) is int else None
        if at is None:
            at = episodes.where(key)
        return episodes.packed[self._name][at]


class _Files(_Absent):
    """A locator's file URIs (by file number), for the files of the installed batch's episodes."""

    def __init__(self, episodes: BatchEpisodes, name: str, count: int) -> None:
        self._episodes, self._name, self._count = episodes, name, count
        self._column = name[: -len("s")]  # locators.steps_files -> locators.steps_file

    def __len__(self) -> int:
        return self._count

    def __bool__(self) -> bool:
        return self._count > 0

    def __getitem__(self, number: Any) -> str:
        return self._episodes.file(self._name, self._column, number)


class _Index(_Absent):
    """The sample index (`SampleIndex`) for the flat samples of the installed batch."""

    def __init__(self, episodes: BatchEpisodes, num_samples: int, count: int) -> None:
        self._episodes, self.num_samples = episodes, num_samples
        self.lengths = _Column(episodes, "lengths", count)

    def locate_many(self, flat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        episodes = self._episodes
        at = np.searchsorted(episodes.offsets, flat, side="right") - 1
        if len(episodes.keys) == 0 or (at < 0).any() or (flat >= episodes.ends[np.maximum(at, 0)]).any():
            raise PiLoaderError(
                f"flat samples {np.asarray(flat).tolist()[:8]} are not all of the episodes of the batch "
                "this loader worker is building (pi_loader.delivery._batch_episodes)"
            )
        return episodes.keys[at], flat - episodes.offsets[at]

    def locate(self, flat: int) -> tuple[int, int]:
        episodes, steps = self.locate_many(np.array([flat], np.int64))
        return int(episodes[0]), int(steps[0])
