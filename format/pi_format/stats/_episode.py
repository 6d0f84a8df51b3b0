"""One episode's mergeable statistics, computed once at ingest (the featurizer fills the
`episodes` row with `episode_stat_columns`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pi_format.stats._bytes import check_values, encode_sketch
from pi_format.stats._grid import GRID_V1, SketchGrid


@dataclass(frozen=True, slots=True)
class EpisodeSummary:
    """The mergeable statistics of one feature of one episode (what its `episodes` row holds).

    Example:
        >>> s = summarize(np.array([[0.0, 1.0], [2.0, 3.0]], np.float32))
        >>> s.count, s.mean.tolist(), s.m2.tolist()
        (2, [1.0, 2.0], [2.0, 2.0])
    """

    count: int
    mean: np.ndarray  # float64 [D]
    m2: np.ndarray  # float64 [D]: sum of squared deviations from `mean`
    min: np.ndarray  # float32 [D]
    max: np.ndarray  # float32 [D]
    sketch: bytes  # encode_sketch(values)

    @property
    def std(self) -> np.ndarray:
        """Population std (ddof 0), float64."""
        return np.sqrt(self.m2 / self.count)


def summarize(values: np.ndarray, grid: SketchGrid = GRID_V1) -> EpisodeSummary:
    """Count, float64 mean and M2 (two-pass), float32 min/max and the sketch of a [T, D] array."""
    v = check_values(values)
    v64 = v.astype(np.float64)
    mean = v64.mean(axis=0)
    m2 = np.square(v64 - mean).sum(axis=0)
    return EpisodeSummary(
        count=int(v.shape[0]),
        mean=mean,
        m2=m2,
        min=v.min(axis=0),
        max=v.max(axis=0),
        sketch=encode_sketch(v, grid),
    )


def episode_stat_columns(kind: str, values: np.ndarray) -> dict[str, object]:
    """The statistics columns of an `episodes` row for one feature (`kind` = "proprio" or
    "action"): `<kind>_mean/_std/_min/_max` (float32 lists), `<kind>_mean64/_m2` (float64
    lists) and `<kind>_sketch` (bytes). The stream job's featurizer calls this.

    Example:
        >>> sorted(episode_stat_columns("action", np.zeros((3, 2), np.float32)))[:3]
        ['action_m2', 'action_max', 'action_mean']
    """
    s = summarize(values)
    return {
        f"{kind}_mean": s.mean.astype(np.float32).tolist(),
        f"{kind}_std": s.std.astype(np.float32).tolist(),
        f"{kind}_min": s.min.tolist(),
        f"{kind}_max": s.max.tolist(),
        f"{kind}_mean64": s.mean.tolist(),
        f"{kind}_m2": s.m2.tolist(),
        f"{kind}_sketch": s.sketch,
    }
