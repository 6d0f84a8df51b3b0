"""The data and video files of a LeRobot v3 export, rotated by size as lerobot's own writer
rotates them (`LeRobotDataset.save_episode`, lerobot 0.4): files `chunk-CCC/file-FFF`, at most
`chunks_size` files per chunk, a new file when the next episode would take the current one to
`data_files_size_in_mb` / `video_files_size_in_mb` (MiB, lerobot's `get_file_size_in_mb`).

- Data (`DataFiles`): an episode goes into the current parquet file unless the file's size so
  far plus its average bytes per frame times the episode's frames reaches the limit (lerobot's
  `_save_episode_data`); the first episode of a file always fits.
- Video (`VideoFiles`, one per camera): each episode is encoded on its own (H.264, as lerobot
  encodes an episode to a temporary file), then appended to the camera's current file unless
  the bytes already there plus the episode's reach the limit (lerobot's `_save_episode_video`).
  Within a file, episodes follow each other: an episode's `from_timestamp` is the duration of
  the episodes before it in that file, 0 in a new file. A file's episodes are joined without
  re-encoding (ffmpeg's concat demuxer, as lerobot's `concatenate_video_files`) once, when the
  file is complete, instead of rewriting the file at every episode.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
_MIB = 1024**2


@dataclass(frozen=True, slots=True)
class FileLimits:
    """How an export's files rotate (written to meta/info.json as lerobot's keys).

    Args:
        chunks_size: files per chunk directory (lerobot's DEFAULT_CHUNK_SIZE: 1000, which keeps
            a directory listable on every filesystem and hub).
        data_files_size_in_mb: a data parquet file's size limit in MiB (lerobot's default 100:
            big enough that the loader opens few files, small enough to download in parts).
        video_files_size_in_mb: a video file's size limit in MiB (lerobot's default 200).

    Example:
        >>> FileLimits(data_files_size_in_mb=10, video_files_size_in_mb=50)
    """

    chunks_size: int = 1000
    data_files_size_in_mb: float = 100
    video_files_size_in_mb: float = 200

    def __post_init__(self) -> None:
        if (
            isinstance(self.chunks_size, bool)
            or not isinstance(self.chunks_size, int)
            or self.chunks_size < 1
        ):
            raise ValueError(f"chunks_size must be an int >= 1, got {self.chunks_size!r}")
        for name in ("data_files_size_in_mb", "video_files_size_in_mb"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < float("inf"):
                raise ValueError(f"{name} must be a number of MiB > 0 (e.g. 0.5), got {value!r}")


def next_file(chunk: int, file: int, chunks_size: int) -> tuple[int, int]:
    """The (chunk, file) after (chunk, file): lerobot's `update_chunk_file_indices`.

    Example:
        >>> next_file(0, 999, 1000)
        (1, 0)
    """
    return (chunk + 1, 0) if file == chunks_size - 1 else (chunk, file + 1)


class DataFiles:
    """The data parquet files: `add(table)` writes an episode's rows and says where."""

    def __init__(self, out_dir: Path, limits: FileLimits) -> None:
        self._out, self._limits = out_dir, limits
        self._at = (0, 0)
        self._writer: pq.ParquetWriter | None = None
        self._sink: pa.NativeFile | None = None
        self._frames = 0  # in the current file

    def add(self, table: pa.Table) -> tuple[int, int]:
        """Write one episode's rows; returns its (chunk_index, file_index)."""
        if self._writer is not None and self._sink is not None:
            size = self._sink.tell() / _MIB  # row groups written so far
            per_frame = size / self._frames if self._frames else 0.0
            if size + per_frame * table.num_rows >= self._limits.data_files_size_in_mb:
                self.close()
                self._at = next_file(*self._at, self._limits.chunks_size)
        if self._writer is None:
            path = self._out / DATA_PATH.format(chunk_index=self._at[0], file_index=self._at[1])
            path.parent.mkdir(parents=True, exist_ok=True)
            self._sink = pa.OSFile(str(path), "wb")
            self._writer = pq.ParquetWriter(self._sink, table.schema, compression="snappy")
            self._frames = 0
        self._writer.write_table(table)
        self._frames += table.num_rows
        return self._at

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        if self._sink is not None:
            self._sink.close()
        self._writer = self._sink = None


class VideoFiles:
    """One camera's video files: `add(frames)` encodes an episode and says where it went and
    from which timestamp; `close()` writes the last file."""

    def __init__(self, out_dir: Path, video_key: str, fps: int, limits: FileLimits, scratch: Path) -> None:
        self._out, self._key, self._fps, self._limits = out_dir, video_key, fps, limits
        self._scratch = Path(tempfile.mkdtemp(prefix="episode-", dir=scratch))
        self._at = (0, 0)
        self._parts: list[Path] = []  # the current file's episodes, encoded
        self._bytes = 0
        self._frames = 0
        self._encoded = 0

    def add(self, frames: np.ndarray) -> tuple[int, int, float, float]:
        """Encode one episode's frames (uint8 [T, H, W, 3]); returns (chunk_index, file_index,
        from_timestamp, to_timestamp) of it in its file."""
        part = self._scratch / f"{self._encoded:06d}.mp4"
        self._encoded += 1
        encode_mp4(part, frames, self._fps)
        size = part.stat().st_size
        if self._parts and (self._bytes + size) / _MIB >= self._limits.video_files_size_in_mb:
            self._finish()
            self._at = next_file(*self._at, self._limits.chunks_size)
        self._parts.append(part)
        start = self._frames / self._fps
        self._bytes += size
        self._frames += len(frames)
        return self._at[0], self._at[1], start, self._frames / self._fps

    def close(self) -> None:
        if self._parts:
            self._finish()
        shutil.rmtree(self._scratch, ignore_errors=True)

    def _finish(self) -> None:
        path = self._out / VIDEO_PATH.format(
            video_key=self._key, chunk_index=self._at[0], file_index=self._at[1]
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        if len(self._parts) == 1:
            shutil.move(str(self._parts[0]), path)
        else:
            concatenate_mp4(self._parts, path)
            for part in self._parts:
                part.unlink()
        self._parts, self._bytes, self._frames = [], 0, 0


def encode_mp4(path: Path, frames: np.ndarray, fps: int) -> None:
    """Frames (uint8 [T, H, W, 3]) as H.264 (yuv420p) MP4."""
    import av

    with av.open(str(path), mode="w") as container:
        stream = container.add_stream("libx264", rate=Fraction(fps))
        stream.height, stream.width = int(frames.shape[1]), int(frames.shape[2])
        stream.pix_fmt = "yuv420p"
        # a keyframe every 2 frames, as lerobot's own encoder settings (g=2): random access by timestamp
        stream.options = {"crf": "18", "g": "2", "x264-params": "scenecut=0:threads=1"}
        for n, image in enumerate(frames):
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(image), format="rgb24")
            frame.pts = n
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)


def concatenate_mp4(parts: list[Path], out: Path) -> None:
    """MP4 files of one codec and size joined without re-encoding (ffmpeg's concat demuxer),
    as lerobot's `concatenate_video_files`."""
    import av

    listing = parts[0].parent / "parts.ffconcat"
    listing.write_text("ffconcat version 1.0\n" + "".join(f"file '{p.resolve()}'\n" for p in parts))
    try:
        with av.open(str(listing), mode="r", format="concat", options={"safe": "0"}) as source:
            video = source.streams.video[0]
            with av.open(str(out), mode="w", options={"movflags": "faststart"}) as sink:
                stream = sink.add_stream_from_template(template=video, opaque=True)
                stream.time_base = video.time_base
                for packet in source.demux(video):
                    if packet.dts is None:  # the demuxer's flush packets
                        continue
                    packet.stream = stream
                    sink.mux(packet)
    finally:
        listing.unlink(missing_ok=True)
