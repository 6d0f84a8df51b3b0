"""Stopping a run early and cleanly: on SIGTERM (how a cluster preempts or drains a node) or at
a deadline, every process finishes its current step, the run checkpoints that step and exits 0.

The signal handler only notes the time the signal arrived; it does no other work (a handler
runs between two bytecodes of whatever the main thread was doing, possibly inside a collective
or a checkpoint write). The loop asks `StopRequest.agreed` once per step, before it takes the
next batch: a collective (the maximum over ranks of each rank's reason), so every rank stops
after the same step and checkpoints the same step, even when the signal reached one process
only. A deadline is checked the same way: `TrainConfig.stop_after_s` (seconds after `train`
started) or `PILAKE_TRAIN_DEADLINE` (a Unix time, as `date +%s` prints it), whichever is
earlier; no step starts after it.
"""

from __future__ import annotations

import math
import os
import signal
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import FrameType
from typing import Any

import numpy as np

from pi_train._files import JsonlLog

DEADLINE_ENV = "PILAKE_TRAIN_DEADLINE"
# SIGTERM is what Kubernetes, Slurm (scancel, preemption) and docker stop send before SIGKILL.
STOP_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGTERM,)
# Reasons, ordered: the maximum over ranks wins (a signal anywhere outranks a deadline).
_REASONS = ("", "deadline", "SIGTERM")


def deadline_from_env(environ: Mapping[str, str] | None = None) -> float | None:
    """`PILAKE_TRAIN_DEADLINE` as a Unix time in seconds, or None when unset or empty.

    Raises:
        ValueError: a value that is not a finite number > 0 (the message names the variable).

    Example:
        >>> deadline_from_env({"PILAKE_TRAIN_DEADLINE": "1798761600"})
        1798761600.0
    """
    env = os.environ if environ is None else environ
    text = env.get(DEADLINE_ENV, "").strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise ValueError(
            f"{DEADLINE_ENV} must be a Unix time in seconds (e.g. $(( $(date +%s) + 3600 ))), "
            f"got {text!r}; unset it to train without a deadline"
        )
    return value


class StopRequest:
    """Whether this run should stop after the current step, and when it was asked to.

    Args:
        stop_after_s: stop once this many seconds have passed since the request was made
            (i.e. since `train` started); None: no such limit.
        deadline: a Unix time after which no step starts; None: none.
        wall: the clock of `deadline` (time.time; replaceable in tests).
        clock: the monotonic clock of `stop_after_s` and of the timings recorded.

    Example:
        >>> stop = StopRequest(stop_after_s=3600.0)
        >>> with stop.installed():
        ...     while not stop.agreed(backend.reduce_max):
        ...         step()
    """

    def __init__(
        self,
        *,
        stop_after_s: float | None = None,
        deadline: float | None = None,
        wall: Callable[[], float] = time.time,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._wall, self._clock = wall, clock
        self._started = clock()
        self._stop_after_s = stop_after_s
        self._deadline = deadline
        self._previous: dict[int, Any] = {}
        # Written by the handler (one assignment each), read by the loop.
        self.signal_at: float | None = None
        self.signal_name: str | None = None
        # Set by `agreed` when the ranks decide to stop.
        self.reason: str | None = None
        self.decided_at: float | None = None

    # -- the signal -------------------------------------------------------------------------

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        # Only notes the time: no I/O, no locks, no collective (see the module docstring).
        if self.signal_at is None:
            self.signal_at = self._clock()
            self.signal_name = signal.Signals(signum).name

    def install(self) -> bool:
        """Handle `STOP_SIGNALS` until `uninstall` (only the main thread can; returns whether
        it did, so a run started on another thread keeps the process's handlers).

        Called again once installed, it takes the signals back from whoever replaced the
        handler since: `jax.distributed.initialize` installs its own SIGTERM handler in C++
        (JAX's preemption notifier), after which SIGTERM no longer reaches Python's handler.
        """
        if threading.current_thread() is not threading.main_thread():
            return False
        for sig in STOP_SIGNALS:
            previous = signal.signal(sig, self._on_signal)
            self._previous.setdefault(sig, previous)
            # Restart system calls the signal interrupts (a socket read inside a collective, a
            # file write): the loop, not an EINTR in a C library, decides what happens next.
            signal.siginterrupt(sig, False)
        return True

    def uninstall(self) -> None:
        """Put back the handlers `install` replaced (a later SIGTERM then ends the process)."""
        for sig, previous in self._previous.items():
            signal.signal(sig, previous if previous is not None else signal.SIG_DFL)
        self._previous.clear()

    def installed(self) -> _Installed:
        """A context manager: `install` on entry, `uninstall` on exit."""
        return _Installed(self)

    # -- the decision ---------------------------------------------------------------------

    def local_reason(self) -> str | None:
        """Why this process alone would stop now: "SIGTERM", "deadline" or None."""
        if self.signal_at is not None:
            return self.signal_name or "SIGTERM"
        if self._stop_after_s is not None and self._clock() - self._started >= self._stop_after_s:
            return "deadline"
        if self._deadline is not None and self._wall() >= self._deadline:
            return "deadline"
        return None

    def agreed(self, reduce_max: Callable[[np.ndarray], np.ndarray]) -> str | None:
        """Whether the run stops now, the same answer on every rank: a collective, called by
        every rank before every step (`reduce_max` is the backend's maximum over ranks).

        Returns the reason ("SIGTERM": some rank got the signal; "deadline") or None.
        """
        mine = self.local_reason()
        code = _REASONS.index(mine) if mine in _REASONS else (len(_REASONS) - 1 if mine else 0)
        agreed = int(np.asarray(reduce_max(np.array([float(code)], np.float64))).reshape(-1)[0])
        if agreed == 0:
            return None
        self.reason = mine if mine else _REASONS[agreed]
        self.decided_at = self._clock()
        return self.reason

    def since_request(self) -> float | None:
        """Seconds from this process's request (its signal; else the agreed decision) to now."""
        start = self.signal_at if self.signal_at is not None else self.decided_at
        return None if start is None else round(self._clock() - start, 3)


class _Installed:
    def __init__(self, stop: StopRequest) -> None:
        self._stop = stop

    def __enter__(self) -> StopRequest:
        self._stop.install()
        return self._stop

    def __exit__(self, *exc: object) -> None:
        self._stop.uninstall()


def stop_checkpoint(
    stop: StopRequest, *, step: int, saved: int | None, save: Callable[[], None] | None
) -> dict[str, Any]:
    """Checkpoint the last finished step (`save`; None when this process ran no step) unless
    `saved`, the newest checkpoint's step, is it already; every rank calls this at the same
    step. Returns the stop's record (`TrainResult.stopped`).

    Example:
        >>> stop_checkpoint(stop, step=37, saved=30, save=lambda: backend.save(...))["checkpoint_step"]
        37
    """
    t0 = time.perf_counter()
    checkpoint = saved
    if save is not None and saved != step:
        save()
        checkpoint = step
    return {
        "reason": stop.reason,
        "received_signal": stop.signal_at is not None,
        "step": step,
        "checkpoint_step": checkpoint,
        "checkpoint_s": round(time.perf_counter() - t0, 3),
        "request_to_stop_s": stop.since_request(),
    }


def record_stop(record: dict[str, Any], out_dir: Path, rank: int, stop: StopRequest) -> None:
    """Append the stop to `<out_dir>/stops.rank<r>.jsonl` and say it, with the time from this
    process's request (its signal, else the ranks' decision) to now: the checkpoint durable, the
    loader's workers gone, the process group left; the interpreter's exit follows.

    Example:
        >>> record_stop(result.stopped, result.out_dir, rank=0, stop=stop)
        pi_train: rank 0 stopped by SIGTERM after step 37 (checkpoint of step 37); 0.13 s ...
    """
    record["request_to_exit_s"] = stop.since_request()
    # keep every earlier line: a run preempted three times keeps three records
    with JsonlLog(out_dir / f"stops.rank{rank}.jsonl", keep_through_step=2**62) as log:
        log.write(record)
    if rank == 0 or record["received_signal"]:
        where = f"checkpoint of step {record['checkpoint_step']}"
        if record["checkpoint_step"] is None:
            where = "no step to checkpoint"
        print(
            f"pi_train: rank {rank} stopped by {record['reason']} after step {record['step']} "
            f"({where}); {record['request_to_exit_s']} s from the request to exit; continue with "
            "resume=True (--resume)",
            flush=True,
        )
