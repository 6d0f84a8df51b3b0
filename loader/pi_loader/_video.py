"""Frames of the lake's chunked training video, fetched lazily and cached per process.

One sample needs one frame per camera; the frame lives in a short H.264 chunk that decodes on
its own (architecture decision 4). The video rows of an episode are read the first time the
episode is touched, from only the files whose episode_id range (from the Delta log) can hold it,
and in those only the row groups whose episode_id statistics can (footers parsed once per
process); chunk decoders are kept in a small LRU and convert to RGB with swscale. Only the
pinned file list and the storage survive pickling; each worker process builds its own caches.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pi_loader._errors import PiLoaderError, SnapshotDataMissingError
from pi_loader._lake import TableFiles
from pi_loader._storage import Storage

# Parsed footers of video files kept per process (a few KB to ~1 MB each for big files).
_FILE_INDEX_SIZE = 256
_VIDEO_COLUMNS = ["camera", "chunk_index", "first_frame", "frame_count", "width", "height", "codec", "data"]


@dataclass(frozen=True, slots=True)
class _Chunk:
    first_frame: int
    frame_count: int
    width: int
    height: int
    data: bytes


@dataclass(frozen=True, slots=True)
class _EpisodeVideo:
    # camera -> (sorted first frames, chunks in the same order)
    cameras: dict[str, tuple[np.ndarray, list[_Chunk]]]


@dataclass(frozen=True, slots=True)
class _RowGroupIndex:
    """A video file's footer and each row group's episode_id range (None: no statistics)."""

    metadata: pq.FileMetaData
    ranges: tuple[tuple[str, str] | None, ...]

    @property
    def schema(self) -> pa.Schema:
        return self.metadata.schema.to_arrow_schema().select(_VIDEO_COLUMNS)

    @staticmethod
    def of(path: str) -> _RowGroupIndex:
        metadata = pq.read_metadata(path)
        names = [metadata.schema.column(j).path for j in range(metadata.num_columns)]
        column = names.index("episode_id") if "episode_id" in names else None
        ranges: list[tuple[str, str] | None] = []
        for g in range(metadata.num_row_groups):
            stats = None if column is None else metadata.row_group(g).column(column).statistics
            low, high = (stats.min, stats.max) if stats is not None and stats.has_min_max else (None, None)
            # anything but plain string bounds (no statistics, binary): read the group, filter rows
            ranges.append((low, high) if isinstance(low, str) and isinstance(high, str) else None)
        return _RowGroupIndex(metadata, tuple(ranges))

    def groups_for(self, episode_id: str) -> list[int]:
        return [g for g, r in enumerate(self.ranges) if r is None or r[0] <= episode_id <= r[1]]


class _LRU:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._items: OrderedDict[Any, Any] = OrderedDict()

    def get(self, key: Any) -> Any:
        value = self._items.get(key)
        if value is not None:
            self._items.move_to_end(key)
        return value

    def put(self, key: Any, value: Any) -> None:
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self.capacity:
            self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)


class VideoFrames:
    """RGB frames of committed episodes, read at a pinned video-table version.

    Thread-safe; picklable and fork-safe: files are read through pyarrow only, and the caches
    are dropped on pickling and rebuilt on first use.
    """

    def __init__(
        self,
        files: TableFiles,
        storage: Storage,
        cameras: Sequence[str],
        episode_files: dict[str, tuple[int, ...]],
        *,
        chunk_cache_size: int,
        episode_cache_size: int,
    ) -> None:
        self._files = files  # the video table's data files at its pinned version
        self._episode_files = episode_files  # episode_id -> indices into files.uris
        self._storage = storage
        self._cameras = tuple(cameras)
        self._chunk_cache_size = chunk_cache_size
        self._episode_cache_size = episode_cache_size
        self._reset()

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._episodes = _LRU(self._episode_cache_size)
        self._chunks = _LRU(self._chunk_cache_size)
        self._files_index = _LRU(_FILE_INDEX_SIZE)
        self.video_reads = 0  # filtered reads of the video table in this process
        self.chunk_decodes = 0  # chunks decoded in this process

    def __getstate__(self) -> dict[str, Any]:
        return {
            "files": self._files,
            "episode_files": self._episode_files,
            "storage": self._storage,
            "cameras": self._cameras,
            "chunk_cache_size": self._chunk_cache_size,
            "episode_cache_size": self._episode_cache_size,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._files = state["files"]
        self._episode_files = state["episode_files"]
        self._storage = state["storage"]
        self._cameras = state["cameras"]
        self._chunk_cache_size = state["chunk_cache_size"]
        self._episode_cache_size = state["episode_cache_size"]
        self._reset()

    def _episode_video(self, episode_id: str, attempt_id: str) -> _EpisodeVideo:
        key = (episode_id, attempt_id)
        with self._lock:
            cached = self._episodes.get(key)
            if cached is not None:
                return cached
        tables = []
        files = self._episode_files.get(episode_id)
        for i in files if files is not None else self._files.files_for([episode_id]):
            uri = self._files.uris[i]
            try:
                path = self._storage.local_path(uri)
                tables.append(self._read_episode_rows(path, episode_id, attempt_id))
            except FileNotFoundError as err:  # RemoteFileNotFoundError too; other StorageErrors pass
                raise SnapshotDataMissingError(
                    f"video file {uri} (video table version {self._files.version}) is gone: {err}; it was "
                    "probably vacuumed"
                ) from err
        rows = pa.concat_tables(tables) if len(tables) != 1 else tables[0]
        rows = rows.sort_by([("camera", "ascending"), ("first_frame", "ascending")])
        by_camera: dict[str, list[_Chunk]] = {}
        for row in rows.to_pylist():
            if row["codec"] != "h264":
                raise PiLoaderError(
                    f"episode {episode_id} camera {row['camera']}: video codec {row['codec']!r} "
                    "is not supported (only 'h264' Annex-B chunks)"
                )
            by_camera.setdefault(row["camera"], []).append(
                _Chunk(row["first_frame"], row["frame_count"], row["width"], row["height"], row["data"])
            )
        video = _EpisodeVideo(
            {
                cam: (np.array([c.first_frame for c in chunks], np.int64), chunks)
                for cam, chunks in by_camera.items()
            }
        )
        with self._lock:
            self.video_reads += 1
            self._episodes.put(key, video)
        return video

    def _read_episode_rows(self, path: str, episode_id: str, attempt_id: str) -> pa.Table:
        """The episode's rows of one video file, reading only the row groups whose episode_id
        statistics can hold it. The file's footer is parsed once per process: in a compacted
        file of 250 episodes, parsing it and scanning with a dataset filter cost ~18 ms per
        episode here, several times the episode's decoding."""
        with self._lock:
            index = self._files_index.get(path)
        if index is None:
            index = _RowGroupIndex.of(path)
            with self._lock:
                self._files_index.put(path, index)
        groups = index.groups_for(episode_id)
        if not groups:
            return pa.table({name: [] for name in _VIDEO_COLUMNS}).cast(index.schema)
        table = pq.ParquetFile(path, metadata=index.metadata).read_row_groups(
            groups, columns=[*_VIDEO_COLUMNS, "episode_id", "attempt_id"]
        )
        keep = pc.and_(
            pc.and_(pc.equal(table["episode_id"], episode_id), pc.equal(table["attempt_id"], attempt_id)),
            pc.is_in(table["camera"], value_set=pa.array(self._cameras, pa.string())),
        )
        return table.filter(keep).select(_VIDEO_COLUMNS)

    def frame(self, episode_id: str, attempt_id: str, camera: str, frame_index: int) -> np.ndarray:
        """The RGB frame `frame_index` of `camera` in the episode, uint8 [H, W, 3].

        Raises:
            PiLoaderError: the episode's video rows do not hold that frame, or decode short.
        """
        decoder, offset, _, _ = self._decoder(episode_id, attempt_id, camera, frame_index)
        return self._checked(decoder.rgb, offset, episode_id, camera, frame_index)

    def frame_yuv(
        self, episode_id: str, attempt_id: str, camera: str, frame_index: int
    ) -> tuple[np.ndarray, int, int]:
        """The yuv420p planes (height*3/2, width) of a frame, with its height and width."""
        decoder, offset, height, width = self._decoder(episode_id, attempt_id, camera, frame_index)
        return self._checked(decoder.yuv, offset, episode_id, camera, frame_index), height, width

    @staticmethod
    def _checked(convert: Any, offset: int, episode_id: str, camera: str, frame_index: int) -> np.ndarray:
        from pi_format.errors import VideoError

        try:
            result: np.ndarray = convert(offset)
            return result
        except VideoError as err:
            where = f"episode {episode_id} camera {camera!r}, frame {frame_index}"
            raise PiLoaderError(f"{where}: {err}") from err

    def _decoder(
        self, episode_id: str, attempt_id: str, camera: str, frame_index: int
    ) -> tuple[Any, int, int, int]:
        from pi_format.video import ChunkDecoder

        video = self._episode_video(episode_id, attempt_id)
        if camera not in video.cameras:
            raise PiLoaderError(
                f"episode {episode_id} (attempt {attempt_id}) has no video rows for camera "
                f"{camera!r}; it has {sorted(video.cameras)}"
            )
        firsts, chunks = video.cameras[camera]
        pos = int(np.searchsorted(firsts, frame_index, side="right")) - 1
        chunk = chunks[pos] if pos >= 0 else None
        if chunk is None or not chunk.first_frame <= frame_index < chunk.first_frame + chunk.frame_count:
            last = chunks[-1].first_frame + chunks[-1].frame_count - 1
            raise PiLoaderError(
                f"episode {episode_id} camera {camera!r}: no video chunk holds frame {frame_index} "
                f"(chunks cover frames {int(firsts[0])}..{last}, possibly with gaps)"
            )
        key = (episode_id, attempt_id, camera, chunk.first_frame)
        with self._lock:
            decoder = self._chunks.get(key)
        if decoder is None:
            # Lazily: a shuffled sample decodes only up to its frame (about half a chunk on
            # average), and neighbours in a block-shuffled run continue the same decoder.
            decoder = ChunkDecoder(chunk.data)
            with self._lock:
                self.chunk_decodes += 1
                self._chunks.put(key, decoder)
        return decoder, frame_index - chunk.first_frame, chunk.height, chunk.width
