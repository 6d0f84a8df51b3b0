"""Normalization statistics of a selection, for the reference policy's inputs and targets.

The one place the trainer gets them: `normalization_stats(dataset, mode)`. It reads the
snapshot's merged statistics (`Dataset.norm_stats()`: exact mean/std and q01/q99 from the
per-episode quantile sketches, no pass over steps or video). Two modes, both an affine map
(x − center) / scale that the policy applies inside its forward pass (constants of the model,
saved with it), so the loader hands raw values and the trainer never normalizes on the host:

- "mean_std": center = mean, scale = std (ddof 0);
- "quantile" (openpi's): center = (q01 + q99) / 2, scale = (q99 − q01) / 2, i.e.
  2 · (x − q01) / (q99 − q01) − 1, which maps [q01, q99] to [−1, 1] and ignores outliers.

A lake whose episodes rows predate the sketches has no q01/q99: "quantile" then raises
`MissingSketchError` (saying how many episodes lack them) rather than silently training on
another normalization; "mean_std" works on any lake. A dataset without `norm_stats` (a test
double) falls back to its `stats` for "mean_std".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from pi_format.stats import MissingSketchError

MODES: tuple[str, ...] = ("mean_std", "quantile")

# A dimension that never moves (std 0, e.g. a gripper that stayed shut) would divide by zero;
# clamping keeps it at 0 after centring instead of inf, as LeRobot's eps does.
MIN_STD = 1e-6


@dataclass(frozen=True, slots=True)
class Normalization:
    """The trainer's normalization of the proprio state and of the actions: (x − *_mean) /
    *_std, float32 vectors (not `pi_loader.NormStats`, the lake's merged statistics it is made
    from). With mode "quantile", *_mean is the center (q01 + q99) / 2 and *_std the half range
    (q99 − q01) / 2; the names stay those of the model's buffers.

    Example:
        >>> stats = normalization_stats(ds)
        >>> (batch["action"] - stats.action_mean) / stats.action_std
    """

    state_mean: np.ndarray
    state_std: np.ndarray
    action_mean: np.ndarray
    action_std: np.ndarray
    mode: str = "mean_std"

    @property
    def state_dim(self) -> int:
        return int(self.state_mean.shape[0])

    @property
    def action_dim(self) -> int:
        return int(self.action_mean.shape[0])

    def to_json(self) -> dict[str, list[float]]:
        return {
            "state_mean": self.state_mean.tolist(),
            "state_std": self.state_std.tolist(),
            "action_mean": self.action_mean.tolist(),
            "action_std": self.action_std.tolist(),
        }


def _vector(value: Any, name: str) -> np.ndarray:
    array = np.asarray(value, dtype=np.float32).reshape(-1)
    if not np.all(np.isfinite(array)):
        raise ValueError(f"the selection's {name} statistics are not finite: {array.tolist()}")
    return array


def _pair(stats: Any) -> tuple[Any, Any]:
    try:
        return stats["observation.state"], stats["action"]
    except (KeyError, TypeError) as err:
        raise ValueError(
            f"the dataset's stats must hold 'observation.state' and 'action', got {stats!r}"
        ) from err


def _affine(stats: Any, name: str, mode: str) -> tuple[np.ndarray, np.ndarray]:
    """(center, scale) of one feature's statistics in `mode` (scale clamped to MIN_STD)."""
    if mode == "quantile":
        low, high = stats.require_quantiles()  # MissingSketchError on lakes without sketches
        q01, q99 = _vector(low, f"{name} q01"), _vector(high, f"{name} q99")
        center, scale = (q01 + q99) / 2, (q99 - q01) / 2
    else:
        center, scale = _vector(stats.mean, f"{name} mean"), _vector(stats.std, f"{name} std")
    return center.astype(np.float32), np.maximum(scale, MIN_STD).astype(np.float32)


def normalization_stats(dataset: Any, mode: str = "mean_std") -> Normalization:
    """The normalization of "observation.state" and "action" over the dataset's selection:
    mode "mean_std" (mean, std) or "quantile" (q01/q99 to [−1, 1]); see the module doc.

    Reads `dataset.norm_stats()` (pi_loader.Dataset: merged from the episodes rows, no pass
    over steps or video); a dataset without it, its `stats` (property or method), for
    "mean_std" only.

    Raises:
        ValueError: an unknown mode, or statistics that are missing or not finite.
        MissingSketchError: mode "quantile" on episodes written before the quantile sketches
            (re-ingest them, select newer episodes, or use "mean_std").

    Example:
        >>> stats = normalization_stats(Dataset(lake, sql=sql, catalog=catalog), "quantile")
        >>> stats.action_dim
        14
    """
    if mode not in MODES:
        raise ValueError(f"normalization mode must be one of {MODES}, got {mode!r}")
    merged = getattr(dataset, "norm_stats", None)
    if callable(merged):
        stats = merged()
    elif mode == "quantile":
        raise MissingSketchError(
            f"{type(dataset).__name__} has no norm_stats(): quantile normalization needs the "
            "merged quantile sketches of pi_loader.Dataset"
        )
    else:
        stats = dataset.stats
        if callable(stats):
            stats = stats()
    state, action = _pair(stats)
    state_center, state_scale = _affine(state, "observation.state", mode)
    action_center, action_scale = _affine(action, "action", mode)
    return Normalization(
        state_mean=state_center,
        state_std=state_scale,
        action_mean=action_center,
        action_std=action_scale,
        mode=mode,
    )
