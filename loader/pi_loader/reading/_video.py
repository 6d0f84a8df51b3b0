"""Frames of the lake's chunked training video: one video row per camera per sample.

One sample needs one frame per camera; the frame lives in a short H.264 chunk that decodes on
its own (architecture decision 4). The writer stores every chunk as a row group of its own, the
chunks of one camera consecutive (SPEC.md §7.2), so frame f of camera k of an episode is in row
group `video_row_groups[k] + f // video_chunk_frames` of the episode's video file. A cache miss
reads that chunk's `data` column chunk with one ranged read, located by the file's chunk index
(`_chunk_index`: built once per host from the footer and the file's small columns, mapped by
every process), so no footer is parsed per process; a file without an index (not laid out as
the writer does, or no index configured) is read as before: its footer (parsed once per process,
LRU-cached) and the one row group through pyarrow. Either way the row is checked against what
the locator promised (episode, attempt, camera, chunk, frames). Chunk decoders are kept in a
small LRU and convert to RGB with swscale; only the locators survive pickling, each process
builds its own caches.
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from pi_format.errors import VideoError
from pi_format.video import ChunkDecoder

from pi_loader._errors import CorruptDataError, PiLoaderError, SnapshotDataMissingError
from pi_loader.reading import _chunk_index as index
from pi_loader.reading._chunk_index import ChunkIndex, row_key
from pi_loader.reading._known_pages import KnownPages
from pi_loader.reading._lake import missing_files_message
from pi_loader.reading._locators import EpisodeLocators
from pi_loader.reading._lru import WeightedLRU
from pi_loader.reading._row_groups import RowGroupReader

CHUNK_CRC = "chunk_crc32"  # pi_format.lake.CHUNK_CRC_COLUMN
# Access units (frame boundaries) of chunks read before, kept per process so a chunk read again
# is not scanned again for its start codes (~23 us of Python per 12 kB chunk, 10% of decoding a
# 224 px frame: benchmarks/loader/PROFILE.md). An entry is ~200 bytes (int32 boundaries and a
# keyframe mask, its key), so 65,536 chunks (a 2-hour 3-camera 15 Hz lake of 10-frame chunks)
# hold ~14 MB per process; past that the oldest are forgotten and scanned again when read.
ACCESS_UNIT_MEMO = 65_536
VIDEO_COLUMNS = (
    "episode_id", "attempt_id", "camera", "chunk_index", "first_frame", "frame_count",
    "width", "height", "codec", "data",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class _Chunk:
    decoder: Any  # pi_format.video.ChunkDecoder
    first_frame: int
    frame_count: int
    width: int
    height: int


class VideoFrames:
    """RGB frames of the selected episodes, read at a pinned video-table version.

    Thread-safe; picklable and fork-safe: files are opened per read, and the caches are dropped
    on pickling and rebuilt on first use. Counters (this process): `video_reads` (video chunks
    read, one per chunk missed) and `chunk_decodes` (chunk decoders made).

    Example:
        >>> rgb = video.frame(e=0, camera=1, frame_index=37)   # uint8 [H, W, 3]
    """

    def __init__(
        self,
        reader: RowGroupReader,
        locators: EpisodeLocators,
        *,
        episode_ids: Sequence[str],
        attempt_ids: Sequence[str],
        cameras: tuple[str, ...],
        version: int,
        chunk_cache_size: int,
        chunk_index: ChunkIndex | None = None,
    ) -> None:
        self._reader = reader
        self._locators = locators
        self._episode_ids = episode_ids
        self._attempt_ids = attempt_ids
        self._cameras = cameras
        self._version = version
        self._chunk_cache_size = chunk_cache_size
        self._chunk_index = chunk_index
        self._reset()

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._chunks: WeightedLRU[tuple[int, int, int], _Chunk] = WeightedLRU(self._chunk_cache_size)
        self._units: dict[tuple[int, int, int], bytes] = {}  # ACCESS_UNIT_MEMO, oldest first
        self._row_keys: dict[tuple[int, int], int] = {}  # (episode, camera) -> row_key
        self._pages = KnownPages()  # page headers of chunks read before: no parse on a re-read
        self.video_reads = 0
        self.chunk_decodes = 0

    def __getstate__(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in _STATE}

    def __setstate__(self, state: dict[str, Any]) -> None:
        for name in _STATE:
            setattr(self, name, state[name])
        self._reset()

    @property
    def chunk_index(self) -> ChunkIndex | None:
        return self._chunk_index

    def frame(
        self, e: int, camera: int, frame_index: int, out: np.ndarray | None = None, chunk: Any = None
    ) -> np.ndarray:
        """The RGB frame `frame_index` of camera number `camera` (in the spec's cameras) of
        episode number `e`, uint8 [H, W, 3]; converted straight into `out` when given (a batch's
        row of that shape), saving a copy. `chunk`: what `read_chunk(e, camera, frame_index)`
        returned for this frame, read ahead; read here when None.

        Raises:
            PiLoaderError: the video rows do not hold that frame, or it does not decode.
            SnapshotDataMissingError: the video file is gone.
        """
        if chunk is None:
            chunk = self._chunk(e, camera, frame_index)
        try:
            return chunk.decoder.rgb(frame_index - chunk.first_frame, out)
        except VideoError as err:
            raise PiLoaderError(f"{self._where(e, camera, frame_index)}: {err}") from err

    def read_chunk(self, e: int, camera: int, frame_index: int) -> Any:
        """The chunk holding frame `frame_index` of camera number `camera` of episode number `e`:
        read and checked (row, span, page CRC) but not decoded, for `frame(..., chunk=...)`.
        A batch reads its frames' chunks a run at a time before decoding them
        (`samples._gather`): the interpreter's reads between two H.264 decodes cost twice what
        the same reads cost back to back (benchmarks/loader/PROFILE.md, fifth pass).

        Raises:
            PiLoaderError, CorruptDataError, SnapshotDataMissingError: as `frame` does.
        """
        return self._chunk(e, camera, frame_index)

    def _chunk(self, e: int, camera: int, frame_index: int) -> _Chunk:
        loc = self._locators
        chunk_frames = int(loc.chunk_frames[e])
        number = frame_index // chunk_frames
        key = (e, camera, number)
        with self._lock:
            chunk = self._chunks.get(key)
        if chunk is not None:
            return chunk
        group = int(loc.video_row_group[e, camera]) + number
        uri = loc.video_files[loc.video_file[e]]
        try:
            chunk = self._indexed_chunk(e, camera, frame_index, number, uri, group)
            if chunk is None:  # no chunk index, or a file not laid out for one
                chunk = self._row_group_chunk(e, camera, frame_index, number, uri, group)
        except CorruptDataError as err:
            raise err.at_episode(self._episode_ids[e], self._attempt_ids[e]) from None
        units = chunk.decoder.access_units
        with self._lock:
            self.video_reads += 1
            self.chunk_decodes += 1
            self._chunks.put(key, chunk)
            if units is not None and key not in self._units:
                self._units[key] = _pack_units(units)
                if len(self._units) > ACCESS_UNIT_MEMO:
                    del self._units[next(iter(self._units))]
        return chunk

    def _indexed_chunk(
        self, e: int, camera: int, frame_index: int, number: int, uri: str, group: int
    ) -> _Chunk | None:
        """The chunk through the file's chunk index: its row from the index (the identity as a
        hash), its data with one ranged read of the `data` column chunk; None without an index
        for the file. The per-sample path: errors are worded only when a check fails."""
        if self._chunk_index is None:
            return None
        path = self._reader.local_path(uri, table="video", version=self._version)
        key = (e, camera, number)
        known = self._pages.entry(key)  # its index row, checked on an earlier read (_known_pages)
        if known:
            return self._known_chunk(key, known, frame_index, uri, path, group)
        try:
            entries = self._chunk_index.entries(self._reader, uri, path)
        except FileNotFoundError as err:  # a local lake's file: local_path does not open it
            raise self._missing(uri, err) from err
        if entries.shape[0] == 0:
            return None
        if not 0 <= group < entries.shape[0]:
            raise PiLoaderError(
                f"video file {uri} has {entries.shape[0]} row groups, the episode's locator names row "
                f"group {group}: the episodes row does not fit the file (was the file rewritten "
                "without updating the locators?)"
            )
        entry = entries[group].tolist()
        expected_key = self._row_keys.get((e, camera))
        if expected_key is None:
            expected_key = row_key(self._episode_ids[e], self._attempt_ids[e], self._cameras[camera])
            with self._lock:
                if len(self._row_keys) >= ACCESS_UNIT_MEMO:
                    self._row_keys.clear()
                self._row_keys[(e, camera)] = expected_key
        first, count = entry[index.FIRST_FRAME], entry[index.FRAME_COUNT]
        if entry[index.ROW_KEY] != expected_key or entry[index.CHUNK_INDEX] != number:
            expected = (self._episode_ids[e], self._attempt_ids[e], self._cameras[camera])
            same = entry[index.ROW_KEY] == expected_key
            holds = (*(expected if same else (None, None, None)), entry[index.CHUNK_INDEX])
            self._check_row(e, camera, frame_index, number, uri, group, holds)
        if first != number * int(self._locators.chunk_frames[e]) or frame_index >= first + count:
            self._check_span(e, camera, frame_index, number, first, count)
        # An index is only built for files whose chunks are all h264.
        checked = (
            entry[index.OFFSET],
            entry[index.SIZE],
            first,
            count,
            entry[index.WIDTH],
            entry[index.HEIGHT],
        )
        return self._known_chunk(key, checked, frame_index, uri, path, group)

    def _known_chunk(
        self,
        key: tuple[int, int, int],
        entry: tuple[int, ...],
        frame_index: int,
        uri: str,
        path: str,
        group: int,
    ) -> _Chunk:
        """The chunk whose index row `entry` (offset, size, first frame, frames, width, height)
        passed the checks: one ranged read, its page checked (CRC every time), its decoder."""
        offset, size, first, count, width, height = entry
        if frame_index >= first + count:
            self._check_span(key[0], key[1], frame_index, key[2], first, count)
        try:
            raw = self._reader.read_range(uri, path, offset, size, what=f"row group {group}")
        except FileNotFoundError as err:
            raise self._missing(uri, err) from err
        packed = self._units.get(key)
        return self._decoder(
            self._pages.value(key, raw, uri, group, entry),
            first,
            count,
            width,
            height,
            None if packed is None else _unpack_units(packed),
        )

    def _row_group_chunk(
        self, e: int, camera: int, frame_index: int, number: int, uri: str, group: int
    ) -> _Chunk:
        """The chunk's row group read through pyarrow (its footer parsed once per process, every
        page's CRC checked), its `chunk_crc32` checked before it is decoded (rows written before
        chunk checksums have none)."""
        path = self._reader.local_path(uri, table="video", version=self._version)
        names = self._reader.footer(uri, path, keep=True).schema.names
        columns = (*VIDEO_COLUMNS, CHUNK_CRC) if CHUNK_CRC in names else VIDEO_COLUMNS
        rows = self._reader.read(uri, group, columns, table="video", version=self._version)
        if rows.num_rows != 1:
            raise PiLoaderError(
                f"{self._where(e, camera, frame_index)}: row group {group} of {uri} should hold chunk "
                f"{number} of this camera, but holds {rows.num_rows} rows: the frame is past the "
                "camera's last chunk, or the episode's locator does not fit the file"
            )
        row = rows.to_pylist()[0]
        found = tuple(row.get(name) for name in ("episode_id", "attempt_id", "camera", "chunk_index"))
        if found != (self._episode_ids[e], self._attempt_ids[e], self._cameras[camera], number):
            self._check_row(e, camera, frame_index, number, uri, group, found)
        self._check_span(e, camera, frame_index, number, row["first_frame"], row["frame_count"])
        expected = row.get(CHUNK_CRC)
        if expected is not None:
            from pi_format.lake import chunk_crc32

            actual = chunk_crc32(row["data"])
            if actual != expected:
                where = {"table": "video", "file": uri, "row_group": group, "column": "data"}
                raise CorruptDataError(f"chunk_crc32 {expected:08x} != {actual:08x} of its bytes", where)
        if row["codec"] != "h264":
            raise PiLoaderError(
                f"{self._where(e, camera, frame_index)}: video codec {row['codec']!r} is not supported "
                "(only 'h264' Annex-B chunks)"
            )
        return self._decoder(row["data"], row["first_frame"], row["frame_count"], row["width"], row["height"])

    @staticmethod
    def _decoder(data: bytes, first: int, count: int, width: int, height: int, units: Any = None) -> _Chunk:
        # Decoded lazily: a shuffled sample decodes only up to its frame (intra-only: that frame
        # alone), and neighbours in a block-shuffled run continue the same decoder. `units`: the
        # chunk's access units when it was read before (the CRC-checked same bytes).
        return _Chunk(ChunkDecoder(data, units), first, count, width, height)

    def _check_row(
        self, e: int, camera: int, frame_index: int, number: int, uri: str, group: int, found: tuple[Any, ...]
    ) -> None:
        """Raise: row group `group` holds `found` (episode, attempt, camera, chunk; the index
        knows the identity only as a hash, None when it is another), not chunk `number`."""
        if (
            found[:3] == (self._episode_ids[e], self._attempt_ids[e], self._cameras[camera])
            and found[3] == number
        ):
            return
        holds = (
            f"chunk {found[3]} of another (episode, attempt, camera)"
            if found[0] is None
            else (f"(episode, attempt, camera, chunk) {found}")
        )
        raise PiLoaderError(
            f"{self._where(e, camera, frame_index)}: row group {group} of {uri} should hold chunk {number} "
            f"of this camera, but holds {holds}: the frame is past the camera's last chunk, or the "
            "episode's locator does not fit the file"
        )

    def _check_span(self, e: int, camera: int, frame_index: int, number: int, first: int, count: int) -> None:
        chunk_frames = int(self._locators.chunk_frames[e])
        if first != number * chunk_frames or frame_index >= first + count:
            raise PiLoaderError(
                f"{self._where(e, camera, frame_index)}: chunk {number} covers frames {first} + {count}, "
                f"not frame {frame_index} (video_chunk_frames={chunk_frames}): no chunk holds it"
            )

    def _where(self, e: int, camera: int, frame_index: int) -> str:
        return f"episode {self._episode_ids[e]} camera {self._cameras[camera]!r}, frame {frame_index}"

    def _missing(self, uri: str, err: FileNotFoundError) -> SnapshotDataMissingError:
        return SnapshotDataMissingError(missing_files_message("video", self._version, uri, err))


def _pack_units(units: Sequence[tuple[int, int, int]]) -> bytes:
    """A chunk's access units as int32 (start, end, is an IDR) triples (~25x smaller than the
    list of tuples)."""
    return struct.pack(f"{3 * len(units)}i", *(int(v) for unit in units for v in unit))


def _unpack_units(packed: bytes) -> list[tuple[int, int, int]]:
    return list(struct.iter_unpack("3i", packed))


_STATE = (
    "_reader", "_locators", "_episode_ids", "_attempt_ids", "_cameras", "_version", "_chunk_cache_size",
    "_chunk_index",
)  # fmt: skip
