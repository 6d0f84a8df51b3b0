"""The checks `pilake import lerobot` makes of a LeRobot v3 dataset's meta/info.json against
its data (pi_jobs.importing.lerobot): a feature the lake has no column for, totals, a feature's
shape against the arrays, fps against the timestamps, a camera's size against its frames. Each
disagreement is a DatasetImportError naming both values and what to fix.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from pi_jobs.importing._episodes import DatasetImportError, ImportOptions

# columns every LeRobot data file has that the lake keeps in its own form (the step index, the
# rate's timestamps, the task as annotations) or needs no column for (global indexes)
BOOKKEEPING = ("timestamp", "frame_index", "episode_index", "index", "task_index")
# how far the timestamps' rate may be from info.json's fps (float32 timestamps: well within)
_FPS_TOLERANCE = 0.01


def check_features(root: Path, features: dict[str, Any], used: set[str], options: ImportOptions) -> None:
    """Refuse a feature the lake has no column for unless `options.drop_features` names it (and
    a --drop-feature that names no feature, or one the lake keeps)."""
    typos = sorted(set(options.drop_features) - set(features))
    if typos:
        raise DatasetImportError(
            f"{root}: --drop-feature {typos} names no feature; features are {sorted(features)}"
        )
    overlap = sorted(set(options.drop_features) & used)
    if overlap:
        raise DatasetImportError(
            f"{root}: --drop-feature {overlap} is a feature the lake keeps; it cannot be dropped"
        )
    unknown = sorted(set(features) - used - set(BOOKKEEPING) - set(options.drop_features))
    if unknown:
        raise DatasetImportError(
            f"{root}: features {unknown} have no column in the lake (it keeps observation.state as the "
            "proprio, action, and the cameras); pass --drop-feature NAME for each to import without "
            "them (recorded nowhere), or fold them into observation.state first"
        )


def check_totals(root: Path, info: dict[str, Any], meta: pa.Table) -> None:
    """info.json's total_episodes / total_frames against meta/episodes."""
    episodes, frames = meta.num_rows, sum(int(v) for v in meta.column("length").to_pylist())
    for key, found in (("total_episodes", episodes), ("total_frames", frames)):
        said = info.get(key)
        if said is not None and said != found:
            raise DatasetImportError(
                f"{root}/meta/info.json says {key} {said}, meta/episodes holds {found}: the dataset is "
                "incomplete or its info.json is wrong; restore it or correct info.json"
            )


def vectors(rows: pa.Table, key: str, features: dict[str, Any], path: str, where: str) -> np.ndarray:
    """The [T, D] float32 values of `key`, checked against info.json's shape for it."""
    try:
        values = np.asarray(rows.column(key).to_pylist(), dtype=np.float32)
    except (ValueError, TypeError) as err:  # ragged rows, nulls, strings
        raise DatasetImportError(
            f"{where}: {path} column {key} is not a [T, D] array of numbers: {err}"
        ) from err
    if values.ndim == 1:
        values = values[:, None]
    declared = features[key].get("shape")
    width = int(np.prod(values.shape[1:]))
    if isinstance(declared, list) and int(np.prod(declared)) != width:
        raise DatasetImportError(
            f"{where}: meta/info.json says {key} has shape {declared}, the rows of {path} have {width} "
            f"values: correct info.json's shape (or the data)"
        )
    return values.reshape(len(values), width)


def check_rate(rows: pa.Table, fps: float, path: str, where: str) -> None:
    """info.json's fps against the median step of the episode's timestamps."""
    if "timestamp" not in rows.column_names or rows.num_rows < 2:
        return
    steps = np.diff(np.asarray(rows.column("timestamp").to_pylist(), dtype=np.float64))
    step = float(np.median(steps))
    if not step > 0 or abs(1.0 / step - fps) > _FPS_TOLERANCE * fps:
        rate = f"{1.0 / step:.3f} fps" if step > 0 else "no rate"
        raise DatasetImportError(
            f"{where}: meta/info.json says fps {fps:g}, the timestamps in {path} step by {step:.6f} s "
            f"({rate}): correct info.json's fps (the lake records the rate as control_rate_hz)"
        )


def check_frame_shape(feature: dict[str, Any], frames: np.ndarray, key: str, where: str) -> None:
    """A camera feature's declared (height, width) against its decoded frames."""
    shape, names = feature.get("shape"), feature.get("names")
    if not isinstance(shape, list) or len(shape) != 3:
        return
    channels_first = names == ["channels", "height", "width"]
    declared = (shape[1], shape[2]) if channels_first else (shape[0], shape[1])
    if tuple(frames.shape[1:3]) != tuple(declared):
        raise DatasetImportError(
            f"{where}: meta/info.json says {key} is {declared[1]}x{declared[0]} (width x height), its "
            f"frames are {frames.shape[2]}x{frames.shape[1]}: correct info.json's shape"
        )
