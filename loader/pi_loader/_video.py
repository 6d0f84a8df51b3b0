"""Frames of the lake's chunked training video: one video row per camera per sample.

One sample needs one frame per camera; the frame lives in a short H.264 chunk that decodes on
its own (architecture decision 4). The writer stores every chunk as a row group of its own, the
chunks of one camera consecutive (SPEC.md §7.2), so frame f of camera k of an episode is in row
group `video_row_groups[k] + f // video_chunk_frames` of the episode's video file: a cache miss
reads that one row group (after the file's footer, parsed once per process) and nothing else.
The row read is checked against what the locator promised. Chunk decoders are kept in a small
LRU and convert to RGB with swscale; only the locators survive pickling, each process builds its
own caches.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from pi_loader._errors import PiLoaderError
from pi_loader._locators import EpisodeLocators
from pi_loader._lru import WeightedLRU
from pi_loader._row_groups import RowGroupReader

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

    Thread-safe; picklable and fork-safe: files are read through pyarrow only, and the caches
    are dropped on pickling and rebuilt on first use. Counters (this process): `video_reads`
    (video row groups read, one per chunk missed) and `chunk_decodes` (chunk decoders made).

    Example:
        >>> rgb = video.frame(e=0, camera=1, frame_index=37)   # uint8 [H, W, 3]
    """

    def __init__(
        self,
        reader: RowGroupReader,
        locators: EpisodeLocators,
        *,
        episode_ids: tuple[str, ...],
        attempt_ids: tuple[str, ...],
        cameras: tuple[str, ...],
        version: int,
        chunk_cache_size: int,
    ) -> None:
        self._reader = reader
        self._locators = locators
        self._episode_ids = episode_ids
        self._attempt_ids = attempt_ids
        self._cameras = cameras
        self._version = version
        self._chunk_cache_size = chunk_cache_size
        self._reset()

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._chunks: WeightedLRU[tuple[int, int, int], _Chunk] = WeightedLRU(self._chunk_cache_size)
        self.video_reads = 0
        self.chunk_decodes = 0

    def __getstate__(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in _STATE}

    def __setstate__(self, state: dict[str, Any]) -> None:
        for name in _STATE:
            setattr(self, name, state[name])
        self._reset()

    def frame(self, e: int, camera: int, frame_index: int) -> np.ndarray:
        """The RGB frame `frame_index` of camera number `camera` (in the spec's cameras) of
        episode number `e`, uint8 [H, W, 3].

        Raises:
            PiLoaderError: the video rows do not hold that frame, or it does not decode.
            SnapshotDataMissingError: the video file is gone.
        """
        chunk = self._chunk(e, camera, frame_index)
        return self._checked(chunk.decoder.rgb, frame_index - chunk.first_frame, e, camera, frame_index)

    def _chunk(self, e: int, camera: int, frame_index: int) -> _Chunk:
        loc = self._locators
        number = frame_index // int(loc.chunk_frames[e])
        key = (e, camera, number)
        with self._lock:
            chunk = self._chunks.get(key)
        if chunk is not None:
            return chunk
        from pi_format.video import ChunkDecoder

        group = int(loc.video_row_group[e, camera]) + number
        uri = loc.video_files[loc.video_file[e]]
        rows = self._reader.read(uri, group, VIDEO_COLUMNS, table="video", version=self._version)
        row = rows.slice(0, 1).to_pylist()[0] if rows.num_rows == 1 else None
        where = f"episode {self._episode_ids[e]} camera {self._cameras[camera]!r}, frame {frame_index}"
        expected = (self._episode_ids[e], self._attempt_ids[e], self._cameras[camera], number)
        found = (
            None if row is None else (row["episode_id"], row["attempt_id"], row["camera"], row["chunk_index"])
        )
        if found != expected:
            raise PiLoaderError(
                f"{where}: row group {group} of {uri} should hold chunk {number} of this camera, but holds "
                + (f"{rows.num_rows} rows" if row is None else f"(episode, attempt, camera, chunk) {found}")
                + ": the frame is past the camera's last chunk, or the episode's locator does not fit "
                "the file"
            )
        assert row is not None
        if (
            row["first_frame"] != number * int(loc.chunk_frames[e])
            or frame_index >= row["first_frame"] + row["frame_count"]
        ):
            raise PiLoaderError(
                f"{where}: chunk {number} covers frames {row['first_frame']} + {row['frame_count']}, not "
                f"frame {frame_index} (video_chunk_frames={int(loc.chunk_frames[e])}): no chunk holds it"
            )
        if row["codec"] != "h264":
            raise PiLoaderError(
                f"{where}: video codec {row['codec']!r} is not supported (only 'h264' Annex-B chunks)"
            )
        # Decoded lazily: a shuffled sample decodes only up to its frame (intra-only: that frame
        # alone), and neighbours in a block-shuffled run continue the same decoder.
        chunk = _Chunk(
            ChunkDecoder(row["data"]), row["first_frame"], row["frame_count"], row["width"], row["height"]
        )
        with self._lock:
            self.video_reads += 1
            self.chunk_decodes += 1
            self._chunks.put(key, chunk)
        return chunk

    def _checked(
        self, convert: Callable[[int], np.ndarray], offset: int, e: int, camera: int, frame: int
    ) -> np.ndarray:
        from pi_format.errors import VideoError

        try:
            return convert(offset)
        except VideoError as err:
            where = f"episode {self._episode_ids[e]} camera {self._cameras[camera]!r}, frame {frame}"
            raise PiLoaderError(f"{where}: {err}") from err


_STATE = ("_reader", "_locators", "_episode_ids", "_attempt_ids", "_cameras", "_version", "_chunk_cache_size")
