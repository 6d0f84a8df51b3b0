"""The meta files of a LeRobot v3 export: meta/info.json, meta/stats.json and the
meta/episodes rows' statistics columns, in lerobot's shapes."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from pi_jobs.exporting._lerobot_files import DATA_PATH, VIDEO_PATH, FileLimits

CODEBASE_VERSION = "v3.0"


def video_key(camera: str) -> str:
    return f"observation.images.{camera}"


def data_stats(data: pa.Table, keys: tuple[str, ...]) -> dict[str, dict[str, list[float]]]:
    out: dict[str, dict[str, list[float]]] = {}
    for key in keys:
        x = np.asarray(data.column(key).to_pylist(), np.float64)
        out[key] = {
            "min": x.min(axis=0).tolist(),
            "max": x.max(axis=0).tolist(),
            "mean": x.mean(axis=0).tolist(),
            "std": x.std(axis=0).tolist(),
            "count": [int(x.shape[0])],
        }
    return out


def episodes_table(rows: list[dict[str, Any]], data: pa.Table, shape: dict[str, Any]) -> pa.Table:
    table = pa.Table.from_pylist(rows)
    # per-episode statistics of the numeric features, as lerobot's own episodes files carry them
    for key in ("observation.state", "action"):
        per = {s: [] for s in ("min", "max", "mean", "std")}  # type: dict[str, list[list[float]]]
        count = []
        for row in rows:
            part = data.slice(row["dataset_from_index"], row["length"])
            x = np.asarray(part.column(key).to_pylist(), np.float64)
            per["min"].append(x.min(axis=0).tolist())
            per["max"].append(x.max(axis=0).tolist())
            per["mean"].append(x.mean(axis=0).tolist())
            per["std"].append(x.std(axis=0).tolist())
            count.append([int(x.shape[0])])
        for stat, values in per.items():
            table = table.append_column(f"stats/{key}/{stat}", pa.array(values, pa.list_(pa.float64())))
        table = table.append_column(f"stats/{key}/count", pa.array(count, pa.list_(pa.int64())))
    return table


def info_json(
    shape: dict[str, Any], episodes: int, frames: int, tasks: int, limits: FileLimits
) -> dict[str, Any]:
    fps = shape["fps"]
    features: dict[str, Any] = {}
    for camera in shape["cameras"]:
        features[video_key(camera)] = {
            "dtype": "video",
            "shape": [shape["video_height"], shape["video_width"], 3],
            "names": ["height", "width", "channels"],
            "info": {
                "video.height": shape["video_height"],
                "video.width": shape["video_width"],
                "video.codec": "h264",
                "video.pix_fmt": "yuv420p",
                "video.is_depth_map": False,
                "video.fps": fps,
                "video.channels": 3,
                "has_audio": False,
            },
        }
    features["observation.state"] = {"dtype": "float32", "shape": [shape["proprio_dim"]], "names": None}
    features["action"] = {"dtype": "float32", "shape": [shape["action_dim"]], "names": None}
    for name, dtype in (
        ("timestamp", "float32"),
        ("frame_index", "int64"),
        ("episode_index", "int64"),
        ("index", "int64"),
        ("task_index", "int64"),
    ):
        features[name] = {"dtype": dtype, "shape": [1], "names": None}
    return {
        "codebase_version": CODEBASE_VERSION,
        "robot_type": shape["robot_type"],
        "total_episodes": episodes,
        "total_frames": frames,
        "total_tasks": tasks,
        "chunks_size": limits.chunks_size,
        "data_files_size_in_mb": _mb(limits.data_files_size_in_mb),
        "video_files_size_in_mb": _mb(limits.video_files_size_in_mb),
        "fps": fps,
        "splits": {"train": f"0:{episodes}"},
        "data_path": DATA_PATH,
        "video_path": VIDEO_PATH if shape["cameras"] else None,
        "features": features,
    }


def _mb(value: float) -> int | float:
    """As lerobot writes its limits: an int where the value is whole (100, not 100.0)."""
    return int(value) if float(value).is_integer() else float(value)
