"""Normalization statistics of a selection, for the reference policy's inputs and targets.

The one place the trainer gets them: `normalization_stats(dataset)`. Today it reads pi_loader's
pooled per-episode statistics (`Dataset.stats`: count-weighted mean and std, min and max, no
pass over the steps); switching to the merged sketches of issue 13 item 5
(`Dataset.norm_stats()`, `pi_loader.NormStats` with q01/q99) changes this function only, and
nothing else in the trainer. The policy applies the
statistics inside its forward pass (constants of the model, saved with it), so the loader hands
raw values and the trainer never normalizes on the host.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

# A dimension that never moves (std 0, e.g. a gripper that stayed shut) would divide by zero;
# clamping keeps it at 0 after centring instead of inf, as LeRobot's eps does.
MIN_STD = 1e-6


@dataclass(frozen=True, slots=True)
class Normalization:
    """The trainer's normalization: mean and std of the proprio state and of the actions
    (float32 vectors; not `pi_loader.NormStats`, the lake's merged statistics it is made from).

    Example:
        >>> stats = normalization_stats(ds)
        >>> (batch["action"] - stats.action_mean) / stats.action_std
    """

    state_mean: np.ndarray
    state_std: np.ndarray
    action_mean: np.ndarray
    action_std: np.ndarray

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


def normalization_stats(dataset: Any) -> Normalization:
    """Mean and std of "observation.state" and "action" over the dataset's selection.

    Reads `dataset.stats` (a property of pi_loader.Dataset today, a method once item 5 lands:
    both are accepted). No pass over steps or video.

    Raises:
        ValueError: statistics that are missing or not finite.

    Example:
        >>> stats = normalization_stats(Dataset(lake, sql=sql, catalog=catalog))
        >>> stats.action_dim
        14
    """
    stats = dataset.stats
    if callable(stats):
        stats = stats()
    try:
        state, action = stats["observation.state"], stats["action"]
    except (KeyError, TypeError) as err:
        raise ValueError(
            f"the dataset's stats must hold 'observation.state' and 'action', got {stats!r}"
        ) from err
    return Normalization(
        state_mean=_vector(state.mean, "observation.state mean"),
        state_std=np.maximum(_vector(state.std, "observation.state std"), MIN_STD),
        action_mean=_vector(action.mean, "action mean"),
        action_std=np.maximum(_vector(action.std, "action std"), MIN_STD),
    )
