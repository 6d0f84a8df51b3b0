"""Step-time decomposition: where each training step's time goes, the maximum over ranks.

Every step is cut into five parts the loop measures with `time.perf_counter`: waiting for the
loader's next batch (`data_wait`), the exposed part of its copy to the device (`h2d`: the backend's
device feed copies each batch while the previous step computes, so this is only what compute
did not hide), the train step (`compute`, with the step's stream synchronized so asynchronous
dispatch cannot hide it in the next step's data wait), writing checkpoints (`checkpoint`) and
the rest (`other`: logging). Every `log_every` steps the ranks take the maximum of each part's
per-step mean (a straggler sets the pace of a synchronous data-parallel step, as LeRobot's and
torchtitan's loggers report);
`summary` does the same over the whole run. The first step of each process is a warm-up (JIT
compilation, worker start-up) and is reported apart, never averaged in.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

PARTS: tuple[str, ...] = ("data_wait", "h2d", "compute", "checkpoint", "other")
_FIELDS: tuple[str, ...] = (*PARTS, "total")
# GPU hosts should see data wait under 5% of the step (issue 13's target); named in verdicts.
DATA_WAIT_TARGET = 0.05


@dataclass(frozen=True, slots=True)
class StepTimes:
    """Seconds of one step's parts, as measured on this rank.

    Example:
        >>> round(StepTimes(data_wait=0.2, h2d=0.01, compute=0.25, total=0.5).other, 3)
        0.04
    """

    data_wait: float
    h2d: float
    compute: float
    total: float
    checkpoint: float = 0.0

    @property
    def other(self) -> float:
        return max(self.total - self.data_wait - self.h2d - self.compute - self.checkpoint, 0.0)

    def vector(self) -> np.ndarray:
        parts = (self.data_wait, self.h2d, self.compute, self.checkpoint, self.other, self.total)
        return np.array(parts, np.float64)


def verdict(ms_per_step: Mapping[str, float]) -> str:
    """One line saying what bounds the step, from per-step milliseconds of each part and total.

    Example:
        >>> verdict({"data_wait": 41, "h2d": 1, "compute": 50, "checkpoint": 0, "other": 8, "total": 100})
        'compute-bound: 50% of step time in compute, 41% waiting for data'
    """
    total = float(ms_per_step["total"])
    if total <= 0:
        return "no steps measured"
    share = {part: float(ms_per_step[part]) / total for part in PARTS}
    data = share["data_wait"]
    biggest = max(PARTS, key=lambda part: share[part])
    if biggest == "data_wait":
        return f"input-bound: {data:.0%} of step time waiting for data"
    if biggest == "h2d":
        return (
            f"transfer-bound: {share['h2d']:.0%} of step time copying batches to the device, "
            f"{data:.0%} waiting for data"
        )
    if biggest == "compute":
        return f"compute-bound: {share['compute']:.0%} of step time in compute, {data:.0%} waiting for data"
    if biggest == "checkpoint":
        return (
            f"checkpoint-bound: {share['checkpoint']:.0%} of step time writing checkpoints (raise "
            f"checkpoint_every), {data:.0%} waiting for data"
        )
    return (
        f"overhead-bound: {share['other']:.0%} of step time in logging and the loop, "
        f"{data:.0%} waiting for data"
    )


def _record(step: int, steps: int, per_step_max: np.ndarray, global_batch: int, ranks: int) -> dict[str, Any]:
    ms = {name: round(float(v) * 1e3, 3) for name, v in zip(_FIELDS, per_step_max, strict=True)}
    total = float(per_step_max[-1])
    return {
        "step": step,
        "steps": steps,
        "ranks": ranks,
        "ms_per_step": ms,
        "data_wait_fraction": round(float(per_step_max[0]) / total, 4) if total > 0 else 0.0,
        "samples_per_s": round(global_batch / total, 2) if total > 0 else 0.0,
        "verdict": verdict(ms),
    }


class StepTimer:
    """Collects `StepTimes` per step; `window` and `summary` are the maxima over ranks.

    `window` and `summary` are collectives when there are several ranks (`reduce_max` is an
    all-reduce of a float vector): every rank calls them at the same steps, which a synchronous
    data-parallel loop does by construction.

    Args:
        global_batch: samples per step over all ranks (samples/s is this / the slowest total).
        reduce_max: element-wise maximum of a float64 vector over ranks (identity on one rank).
        ranks: how many ranks take part (recorded).
        warmup_steps: the first steps this process runs, left out of windows and summary.

    Example:
        >>> timer = StepTimer(global_batch=64, reduce_max=lambda v: v, ranks=1)
        >>> timer.add(StepTimes(data_wait=0.1, h2d=0.0, compute=0.3, total=0.45))
        >>> timer.window(step=10)["ms_per_step"]["compute"]
    """

    def __init__(
        self,
        *,
        global_batch: int,
        reduce_max: Callable[[np.ndarray], np.ndarray],
        ranks: int = 1,
        warmup_steps: int = 1,
    ) -> None:
        self._global_batch = global_batch
        self._reduce_max = reduce_max
        self._ranks = ranks
        self._warmup_left = warmup_steps
        self._window = np.zeros(len(_FIELDS))
        self._window_steps = 0
        self._run = np.zeros(len(_FIELDS))
        self._run_steps = 0
        self.warmup: list[dict[str, float]] = []

    def add(self, times: StepTimes) -> None:
        """Record one step's times on this rank."""
        vector = times.vector()
        if self._warmup_left > 0:
            self._warmup_left -= 1
            self.warmup.append({n: round(float(v) * 1e3, 3) for n, v in zip(_FIELDS, vector, strict=True)})
            return
        self._window += vector
        self._window_steps += 1
        self._run += vector
        self._run_steps += 1

    def _reduced(self, sums: np.ndarray, steps: int) -> np.ndarray:
        # Every rank ran the same number of steps, so the maximum of per-step means is the
        # maximum of sums divided by one count.
        return np.asarray(self._reduce_max(sums / max(steps, 1)), np.float64)

    def window(self, step: int) -> dict[str, Any] | None:
        """The window since the last call as a JSON record (None when it has no measured step).
        A collective."""
        steps = self._window_steps
        if steps == 0:
            return None
        reduced = self._reduced(self._window, steps)
        self._window = np.zeros(len(_FIELDS))
        self._window_steps = 0
        return _record(step, steps, reduced, self._global_batch, self._ranks)

    def summary(self, step: int) -> dict[str, Any]:
        """The whole run (warm-up left out) as a JSON record with the verdict. A collective."""
        reduced = self._reduced(self._run, self._run_steps)
        record = _record(step, self._run_steps, reduced, self._global_batch, self._ranks)
        record["warmup_ms"] = self.warmup
        return record
