"""A camera of an episode as a playable MP4: the lake's H.264 chunks remuxed, never re-encoded.

The lake stores each camera as Annex-B H.264 chunks, every frame an IDR (architecture decision
4). A browser plays H.264 in MP4, so the chunks are concatenated into one elementary stream and
copied packet by packet into an MP4 (PyAV, `moov` first so playback starts before the download
ends), each packet stamped with its frame's own timestamp from the video rows. Files are cached
under the UI's cache folder by a hash of (episode, attempt, camera): an attempt's rows never
change, so a cached file never goes stale; a new attempt (a backfill) gets a new file.
"""

from __future__ import annotations

import hashlib
import io
import itertools
import os
import threading
from fractions import Fraction
from pathlib import Path
from typing import Any

import pyarrow as pa

from pi_jobs.ui._errors import PathRefused, UiError

# MP4's customary video clock: 90 kHz represents every frame rate a robot camera uses.
_TIME_BASE = Fraction(1, 90_000)
_locks: dict[str, threading.Lock] = {}
_locks_guard = threading.Lock()


def safe_join(root: Path, relative: str) -> Path:
    """`root / relative`, refusing an absolute path, a `..` component or anything else that
    resolves outside `root` (PathRefused).

    Example:
        >>> safe_join(Path("/srv/static"), "uPlot.min.css")
        PosixPath('/srv/static/uPlot.min.css')
    """
    if not relative or relative.startswith(("/", "\\")) or os.path.isabs(relative) or "\x00" in relative:
        raise PathRefused(f"file path must be relative to its folder, got {relative!r}")
    parts = relative.replace("\\", "/").split("/")
    if any(p in ("..", "") for p in parts) or ":" in parts[0]:
        raise PathRefused(f"file path must not leave its folder (no '..' or empty parts), got {relative!r}")
    base = root.resolve()
    path = (base / relative).resolve()
    if not path.is_relative_to(base):
        raise PathRefused(f"file path {relative!r} resolves outside {base}")
    return path


def cache_name(episode_id: str, attempt_id: str, camera: str) -> str:
    """The cache file of one camera of one attempt: a hash, never a name taken from a request."""
    digest = hashlib.sha256(f"{episode_id}\x1f{attempt_id}\x1f{camera}".encode()).hexdigest()
    return f"{digest[:32]}.mp4"


def remux_mp4(chunks: pa.Table, out: Path) -> int:
    """Write the chunks (`chunk_index`, `frame_timestamps_ns`, `codec`, `data`, in order) as one
    MP4 at `out`, packets copied; returns the number of frames.

    Raises:
        UiError: a codec other than H.264, or a frame count that disagrees with the timestamps.

    Example:
        >>> remux_mp4(video_rows(layout, "ep-000", "attempt-0", "front"), Path("/tmp/front.mp4"))
        40
    """
    import av

    codecs = set(chunks.column("codec").to_pylist())
    if codecs != {"h264"}:
        raise UiError(f"only h264 video rows can be remuxed, got codecs {sorted(codecs)}")
    stamps = [t for ts in chunks.column("frame_timestamps_ns").to_pylist() for t in ts]
    origin = stamps[0] if stamps else 0
    ticks = [(t - origin) * _TIME_BASE.denominator // 1_000_000_000 for t in stamps]
    durations = [b - a for a, b in itertools.pairwise(ticks)]
    durations.append(durations[-1] if durations else _TIME_BASE.denominator // 10)
    stream = b"".join(chunks.column("data").to_pylist())
    frames = 0
    source: Any
    with av.open(io.BytesIO(stream), format="h264") as source:
        video_in = source.streams.video[0]
        with av.open(str(out), "w", format="mp4", options={"movflags": "+faststart"}) as sink:
            video_out = sink.add_stream_from_template(video_in)
            video_out.time_base = _TIME_BASE
            for packet in source.demux(video_in):
                if packet.size == 0:  # the demuxer's end-of-stream flush
                    continue
                if frames >= len(stamps):
                    raise UiError(f"the chunks hold more frames than their {len(stamps)} timestamps")
                packet.pts = packet.dts = ticks[frames]
                # each frame lasts until the next; the last as long as the one before it (left
                # unset, the muxer guessed 1.3 s for it and the video outlasted the episode)
                packet.duration = durations[frames]
                packet.time_base = _TIME_BASE
                packet.stream = video_out
                sink.mux(packet)
                frames += 1
    if frames != len(stamps):
        raise UiError(f"the chunks hold {frames} frames but {len(stamps)} timestamps")
    return frames


def cached_mp4(
    cache_dir: Path, episode_id: str, attempt_id: str, camera: str, chunks: pa.Table | None
) -> Path:
    """The MP4 of one camera, remuxed into the cache on first use (`chunks` read by the caller
    when the file is missing; pass None to only look)."""
    path = cache_dir / cache_name(episode_id, attempt_id, camera)
    with _locks_guard:
        lock = _locks.setdefault(path.name, threading.Lock())
    with lock:
        if path.exists() or chunks is None:
            return path
        cache_dir.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.partial")
        try:
            remux_mp4(chunks, partial)
            os.replace(partial, path)  # a reader never sees half a file
        finally:
            partial.unlink(missing_ok=True)
    return path
