"""`pilake view EPISODE --rerun OUT.rrd`: one episode as a Rerun recording.

Every camera goes in as an encoded video (the lake's H.264 chunks remuxed to MP4, as the UI
serves them, logged as `rr.AssetVideo`) with one `VideoFrameReference` per frame; proprio and
action as scalar series, one entity per dimension. Everything sits on one timeline, `time`
(nanoseconds from the episode's first step), plus `step` for the steps, so the viewer shows the
frames and the curves in step. Rerun is an extra (`pi-lake[rerun]`), imported here only.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pi_format import LakeLayout

from pi_jobs.ui import _reads
from pi_jobs.ui._video import remux_mp4

TIMELINE = "time"


@dataclass(frozen=True, slots=True)
class RerunSummary:
    """What `write_rerun` wrote."""

    path: Path
    episode_id: str
    attempt_id: str
    steps: int
    frames: dict[str, int]  # per camera


def write_rerun(layout: LakeLayout, episode_id: str, out: Path) -> RerunSummary:
    """Write the visible attempt of `episode_id` as a Rerun recording file at `out` (.rrd).

    Entities: `cameras/<name>` (video asset + frame references), `proprio/<d>` and
    `action/<d>` (scalars). Timelines: `time` (ns from the first step) and `step`.

    Raises:
        ImportError: rerun-sdk is not installed (the `rerun` extra).
        pi_jobs.ui.NotFound: the episode is not visible in the lake.

    Example:
        >>> write_rerun(LakeLayout(".pilake/lake"), "sim0-r000-e00000", Path("episode.rrd")).frames
        {'front': 120, 'wrist': 120}
    """
    try:
        import rerun as rr
    except ImportError as err:
        raise ImportError(
            "pilake view --rerun needs the `rerun` extra: pip install 'pi-lake[rerun]'"
        ) from err
    from deltalake import DeltaTable

    episode = _reads.read_episode(layout, episode_id)
    steps = (
        DeltaTable(layout.steps)
        .to_pyarrow_table(
            columns=["step_index", "timestamp_ns"],
            filters=[("episode_id", "=", episode_id), ("attempt_id", "=", episode.attempt_id)],
        )
        .sort_by("step_index")
    )
    stamps = np.asarray(steps.column("timestamp_ns").to_numpy(), dtype=np.int64)
    origin = int(stamps[0]) if len(stamps) else 0
    rec = rr.new_recording("pilake", recording_id=f"{episode_id}/{episode.attempt_id}")
    out.parent.mkdir(parents=True, exist_ok=True)
    rr.save(str(out), recording=rec)
    rr.log("episode", rr.TextDocument(_describe(episode)), static=True, recording=rec)
    step_time = [
        rr.TimeNanosColumn(TIMELINE, stamps - origin),
        rr.TimeSequenceColumn("step", np.arange(len(stamps))),
    ]
    for feature, dims in (("proprio", episode.proprio), ("action", episode.action)):
        for d, values in enumerate(dims):
            rr.send_columns(
                f"{feature}/{d}",
                indexes=step_time,
                columns=rr.Scalar.columns(scalar=np.asarray(values)),
                recording=rec,
            )
    frames: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="pilake-rerun-") as tmp:
        for camera in episode.cameras:
            chunks = _reads.video_rows(layout, episode_id, episode.attempt_id, camera, episode.row)
            mp4 = Path(tmp) / f"{len(frames)}.mp4"
            count = remux_mp4(chunks, mp4)
            entity = f"cameras/{camera}"
            rr.log(
                entity,
                rr.AssetVideo(contents=mp4.read_bytes(), media_type="video/mp4"),
                static=True,
                recording=rec,
            )
            frame_ns = np.array(
                [t for ts in chunks.column("frame_timestamps_ns").to_pylist() for t in ts], dtype=np.int64
            )
            # the MP4's own clock starts at its first frame; the timeline at the first step
            rr.send_columns(
                entity,
                indexes=[rr.TimeNanosColumn(TIMELINE, frame_ns - origin)],
                columns=rr.VideoFrameReference.columns_nanoseconds(frame_ns - int(frame_ns[0])),
                recording=rec,
            )
            frames[camera] = count
    rec.flush(blocking=True)
    rr.disconnect(recording=rec)
    return RerunSummary(out, episode_id, episode.attempt_id, len(stamps), frames)


def _describe(episode: _reads.Episode) -> str:
    lines = [f"episode {episode.episode_id}, attempt {episode.attempt_id}"]
    lines += [f"{k}: {v}" for k, v in episode.metadata()]
    return "\n".join(lines)
