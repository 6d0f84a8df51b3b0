"""`pilake export lerobot PIN OUT_DIR`: a dataset pin written as a LeRobot v3 dataset.

The pin's exact rows ((episode_id, attempt_id) per episode, `pi_format.lake.pins`) are read
from the lake: proprio and action from `steps` (float32 as stored), one frame per step per
camera from `video` (the training chunks decoded, the frame each step shows: its
`camera_frame_index`), and the language from the pin's instruction annotations as the pin saw
them (else the episode's task). Written as lerobot's v3 layout:

    meta/info.json, meta/stats.json, meta/tasks.parquet, meta/episodes/chunk-000/file-000.parquet
    data/chunk-CCC/file-FFF.parquet
    videos/observation.images.<camera>/chunk-CCC/file-FFF.mp4   (H.264, yuv420p)

Each row of meta/episodes also carries `pilake/episode_id` and `pilake/attempt_id`: the lake row
the episode was exported from (LeRobot's `episode_index` is only a position; lerobot reads the
columns it knows by name, which `test_lerobot_opens_the_export` checks where lerobot is installed).

Features: `observation.state`, `action`, `observation.images.<camera>`, and lerobot's
`timestamp`, `frame_index`, `episode_index`, `index`, `task_index`. LeRobot needs one fps and one
shape per feature: a pin mixing rates, dimensions or cameras is refused with the episodes that
differ (pin the ones that agree). Data and video files rotate by size as lerobot's writer
rotates them (`FileLimits`: lerobot's defaults of 1000 files per chunk, 100 MiB data files,
200 MiB video files, or others; `_lerobot_files`), and each meta/episodes row says which data and
video files hold the episode and from which timestamp. The meta/episodes rows stay in one file
(about 1 kB an episode: 100 MiB is ~100,000 episodes).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pi_format import LakeLayout
from pi_format.lake import AnnotationStore, PinStore, current_annotations, pinned_rows, value_at

from pi_jobs.errors import PiJobsError
from pi_jobs.exporting._lerobot_files import DATA_PATH, VIDEO_PATH, DataFiles, FileLimits, VideoFiles
from pi_jobs.exporting._lerobot_meta import CODEBASE_VERSION, data_stats, episodes_table, info_json
from pi_jobs.exporting._lerobot_meta import video_key as _key

__all__ = ["DATA_PATH", "VIDEO_PATH", "ExportError", "ExportReport", "FileLimits", "export_lerobot"]
_EPISODE_COLUMNS = [
    "episode_id",
    "attempt_id",
    "task",
    "step_count",
    "control_rate_hz",
    "robot_type",
    "proprio_dim",
    "action_dim",
    "cameras",
    "video_width",
    "video_height",
]


class ExportError(PiJobsError):
    """A pin cannot be exported as asked (mixed shapes or rates, rows missing)."""


@dataclass(frozen=True, slots=True)
class ExportReport:
    """What `export_lerobot` wrote."""

    out_dir: Path
    episodes: int
    frames: int
    tasks: int
    cameras: tuple[str, ...]
    fps: int
    bytes_written: int

    def lines(self) -> list[str]:
        return [
            f"export: {self.episodes} episodes, {self.frames} frames, {self.tasks} tasks, cameras "
            f"{list(self.cameras)} at {self.fps} fps -> {self.out_dir} (LeRobot {CODEBASE_VERSION}, "
            f"{self.bytes_written / 1e6:.2f} MB)",
            f"open it with LeRobotDataset('pilake/export', root='{self.out_dir}')",
        ]


def export_lerobot(
    layout: LakeLayout,
    pin_name: str,
    out_dir: Path,
    *,
    limits: FileLimits | None = None,
    say: Callable[[str], None] = print,
) -> ExportReport:
    """Write the pin `pin_name` as a LeRobot v3 dataset under `out_dir` (see the module docstring).

    Args:
        limits: how data and video files rotate (default: lerobot's, `FileLimits()`).

    Raises:
        ExportError: `out_dir` is not empty, the pin mixes fps/dimensions/cameras, or rows the
            pin names are gone.

    Example:
        >>> export_lerobot(LakeLayout("/data/lake"), "pick-v3", Path("pick-v3-lerobot")).episodes
        1200
        >>> small = FileLimits(data_files_size_in_mb=10, video_files_size_in_mb=50)
        >>> export_lerobot(layout, "pick-v3", Path("pick-v3-small-files"), limits=small).episodes
    """
    from deltalake import DeltaTable

    limits = limits if limits is not None else FileLimits()
    out_dir = Path(out_dir)
    if out_dir.exists() and any(out_dir.iterdir()):
        raise ExportError(f"{out_dir} is not empty: export into a new directory")
    pin = PinStore(layout).get(pin_name)
    episodes = pinned_rows(
        DeltaTable(layout.episodes).to_pyarrow_table(columns=_EPISODE_COLUMNS),
        pin.episode_ids,
        pin.attempt_ids,
    )
    if episodes.num_rows != len(pin.episode_ids):
        raise ExportError(
            f"pin {pin_name!r} names {len(pin.episode_ids)} rows, the lake has {episodes.num_rows} of them "
            "(`pilake dataset show` says which)"
        )
    shape = _one_shape(episodes, pin_name)
    notes = current_annotations(
        AnnotationStore(layout).read_all(list(pin.episode_ids)),
        as_of_ns=pin.created_at_ns,
        kinds=["instruction"],
    )
    cameras: tuple[str, ...] = shape["cameras"]
    fps = shape["fps"]
    out_dir.mkdir(parents=True, exist_ok=True)
    scratch = out_dir / ".export-scratch"  # each episode's encoding until its file is complete
    scratch.mkdir()
    data_files = DataFiles(out_dir, limits)
    videos = {c: VideoFiles(out_dir, _key(c), fps, limits, scratch) for c in cameras}
    tasks: dict[str, int] = {}
    data_parts: list[pa.Table] = []
    meta_rows: list[dict[str, Any]] = []
    index = 0
    try:
        for n, row in enumerate(episodes.to_pylist()):
            steps = _steps(layout, row["episode_id"], row["attempt_id"])
            frames = _frames(layout, row, steps, cameras)
            length = steps.num_rows
            task_of = [
                value_at(notes, row["episode_id"], t, "instruction") or row["task"] or "unspecified"
                for t in range(length)
            ]
            for text in task_of:
                tasks.setdefault(text, len(tasks))
            part = _data_table(
                steps, n, index, [tasks[t] for t in task_of], fps, shape["proprio_dim"], shape["action_dim"]
            )
            data_parts.append(part)
            chunk, file = data_files.add(part)
            meta: dict[str, Any] = {
                "episode_index": n,
                "tasks": sorted(set(task_of), key=task_of.index),
                "length": length,
                "data/chunk_index": chunk,
                "data/file_index": file,
                "dataset_from_index": index,
                "dataset_to_index": index + length,
                "meta/episodes/chunk_index": 0,
                "meta/episodes/file_index": 0,
                # where each exported episode came from: LeRobot's episode_index is a position,
                # these name the lake's rows (the pin's (episode_id, attempt_id))
                "pilake/episode_id": row["episode_id"],
                "pilake/attempt_id": row["attempt_id"],
            }
            for camera in cameras:
                chunk, file, start, stop = videos[camera].add(frames[camera])
                meta.update(
                    {
                        f"videos/{_key(camera)}/chunk_index": chunk,
                        f"videos/{_key(camera)}/file_index": file,
                        f"videos/{_key(camera)}/from_timestamp": start,
                        f"videos/{_key(camera)}/to_timestamp": stop,
                    }
                )
            meta_rows.append(meta)
            index += length
            say(f"  export: episode {n + 1}/{episodes.num_rows} ({row['episode_id']}, {length} frames)")
    finally:
        data_files.close()
        for video in videos.values():
            video.close()
        shutil.rmtree(scratch, ignore_errors=True)
    data = pa.concat_tables(data_parts)
    stats = data_stats(data, ("observation.state", "action"))
    _write_parquet(
        episodes_table(meta_rows, data, shape),
        out_dir / "meta" / "episodes" / "chunk-000" / "file-000.parquet",
    )
    # as lerobot writes it: a pandas frame of task_index indexed by the task string (its reader
    # takes a frame's task as `tasks.iloc[task_index].name`)
    import pandas as pd  # type: ignore[import-untyped]

    pd.DataFrame({"task_index": list(tasks.values())}, index=list(tasks)).to_parquet(
        out_dir / "meta" / "tasks.parquet"
    )
    (out_dir / "meta" / "stats.json").write_text(json.dumps(stats, indent=2))
    info = info_json(shape, episodes.num_rows, index, len(tasks), limits)
    (out_dir / "meta" / "info.json").write_text(json.dumps(info, indent=4))
    written = sum(p.stat().st_size for p in out_dir.rglob("*") if p.is_file())
    return ExportReport(out_dir, episodes.num_rows, index, len(tasks), cameras, fps, written)


def _one_shape(episodes: pa.Table, pin: str) -> dict[str, Any]:
    shape: dict[str, Any] = {}
    for name in ("proprio_dim", "action_dim", "video_width", "video_height", "robot_type"):
        values = pc.unique(episodes.column(name)).to_pylist()
        if len(values) != 1:
            raise ExportError(
                f"pin {pin!r} mixes {name} {sorted(values)}; LeRobot needs one: pin episodes that agree"
            )
        shape[name] = values[0]
    cameras = {tuple(c) for c in episodes.column("cameras").to_pylist()}
    if len(cameras) != 1:
        raise ExportError(f"pin {pin!r} mixes camera sets {sorted(cameras)}; LeRobot needs one set")
    shape["cameras"] = next(iter(cameras))
    rates = set(episodes.column("control_rate_hz").to_pylist())
    if len(rates) != 1 or float(next(iter(rates))) != int(next(iter(rates))):
        raise ExportError(f"pin {pin!r} has control rates {sorted(rates)}; LeRobot needs one integer fps")
    shape["fps"] = int(next(iter(rates)))
    return shape


def _steps(layout: LakeLayout, episode_id: str, attempt_id: str) -> pa.Table:
    from deltalake import DeltaTable

    rows = DeltaTable(layout.steps).to_pyarrow_table(
        columns=["episode_id", "attempt_id", "step_index", "proprio", "action", "camera_frame_index"],
        filters=[("episode_id", "=", episode_id)],
    )
    rows = rows.filter(pc.equal(rows.column("attempt_id"), attempt_id)).sort_by("step_index")
    if rows.num_rows == 0:
        raise ExportError(f"no steps of {episode_id} attempt {attempt_id} in {layout.steps}")
    return rows


def _frames(
    layout: LakeLayout, row: dict[str, Any], steps: pa.Table, cameras: tuple[str, ...]
) -> dict[str, np.ndarray]:
    """Per camera, the frame each step shows (uint8 [T, H, W, 3]), decoded from the lake's chunks."""
    from deltalake import DeltaTable
    from pi_format.video import decode_chunk_rgb

    video = DeltaTable(layout.video).to_pyarrow_table(
        columns=["episode_id", "attempt_id", "camera", "chunk_index", "first_frame", "data"],
        filters=[("episode_id", "=", row["episode_id"])],
    )
    video = video.filter(pc.equal(video.column("attempt_id"), row["attempt_id"]))
    shown = np.asarray(steps.column("camera_frame_index").to_pylist(), dtype=np.int64)
    out = {}
    for k, camera in enumerate(cameras):
        decoded: list[np.ndarray] = []
        mine = video.filter(pc.equal(video.column("camera"), camera)).sort_by("chunk_index")
        for chunk in mine.to_pylist():
            decoded.extend(
                decode_chunk_rgb(chunk["data"], height=row["video_height"], width=row["video_width"])
            )
        if not decoded or shown[:, k].max() >= len(decoded):
            raise ExportError(f"{row['episode_id']}: camera {camera} has {len(decoded)} frames in the lake")
        out[camera] = np.stack([decoded[i] for i in shown[:, k]])
    return out


def _data_table(
    steps: pa.Table,
    episode: int,
    start: int,
    task_index: list[int],
    fps: int,
    proprio_dim: int,
    action_dim: int,
) -> pa.Table:
    n = steps.num_rows
    proprio = np.asarray(steps.column("proprio").to_pylist(), np.float32).reshape(n, proprio_dim)
    action = np.asarray(steps.column("action").to_pylist(), np.float32).reshape(n, action_dim)
    return pa.table(
        {
            "observation.state": pa.FixedSizeListArray.from_arrays(pa.array(proprio.ravel()), proprio_dim),
            "action": pa.FixedSizeListArray.from_arrays(pa.array(action.ravel()), action_dim),
            "timestamp": pa.array((np.arange(n) / fps).astype(np.float32)),
            "frame_index": pa.array(np.arange(n, dtype=np.int64)),
            "episode_index": pa.array(np.full(n, episode, np.int64)),
            "index": pa.array(np.arange(start, start + n, dtype=np.int64)),
            "task_index": pa.array(np.asarray(task_index, np.int64)),
        }
    )


def _write_parquet(table: pa.Table, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, compression="snappy")
