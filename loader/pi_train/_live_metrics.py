"""Live step-time metrics: what `_timing` decomposes after the run, served to Prometheus while it runs.

Off unless asked (`TrainConfig.metrics_port` / `pilake train --metrics-port N`, 0 = off, as the
loader's endpoint is): a run on a shared host then never fights another over a port. When on,
rank r serves `http://0.0.0.0:<metrics_port + local rank>/metrics` (the local rank is
LOCAL_RANK, as torchrun sets it, else rank mod LOCAL_WORLD_SIZE, which is what
`pi_train.launch` gives), from the first step to the end of `train`; a port that is taken is
a `PiTrainError` before any data is opened, never a run without metrics nobody noticed.

Every series carries `rank`. Per step (the first step of each process is a warm-up, left out
of the histograms as `_timing` leaves it out of the decomposition, and shown apart in
`pilake_train_warmup_seconds`): `pilake_train_step_seconds{part}` is a histogram of each part of
the step — data_wait, h2d, compute, checkpoint, other and total — whose `_sum` per part over
`_sum{part="total"}` is the share of the step (the alert `PilakeTrainInputBound` reads that).
`part="eval"` is observed once per evaluation (`--eval-every`; its `_count` counts evaluations):
the loop evaluates between steps, so eval time is in no step's total.
Throughput: `pilake_train_samples_total` (this rank's samples; `sum(rate(...))` is the global
samples/s) and `pilake_train_samples_per_second` (the global batch over this rank's step time,
over the last `log_every` steps). No MFU: the reference policy's FLOPs per sample are not counted
anywhere and a CPU host has no peak to divide by, so a figure would be invented (samples/s only).

Costs per step: a few histogram observations (microseconds); the figures are
rendered when scraped, on the server's thread.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterator, Mapping
from types import TracebackType
from typing import Any

from pi_train._config import ProcessGroup, TrainConfig
from pi_train._errors import PiTrainError
from pi_train._timing import StepTimes

__all__ = [
    "BUCKETS",
    "LIVE_PARTS",
    "METRIC_NAMES",
    "LiveMetrics",
    "MetricsOff",
    "live_metrics",
    "metrics_port_of",
]

# The parts as exported: `_timing.PARTS`, their total, and eval (once per evaluation, not per step).
LIVE_PARTS: tuple[str, ...] = ("data_wait", "h2d", "compute", "checkpoint", "eval", "other", "total")
# Seconds: from a 0.5 ms CPU step part (the reference model's h2d on this host) to a 10-minute
# checkpoint of a large model; about 2.5x apart so a quantile is never off by more than that.
BUCKETS: tuple[float, ...] = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, math.inf,
)  # fmt: skip

# Every series name this module registers (counters with _total), for the alert and dashboard tests.
METRIC_NAMES: tuple[str, ...] = (
    "pilake_train_step_seconds",
    "pilake_train_warmup_seconds",
    "pilake_train_steps_total",
    "pilake_train_step",
    "pilake_train_samples_total",
    "pilake_train_samples_per_second",
    "pilake_train_info",
)


def metrics_port_of(config: TrainConfig, group: ProcessGroup, environ: dict[str, str] | None = None) -> int:
    """The port this rank serves on: `config.metrics_port` plus the local rank; 0 when off.

    Example:
        >>> group = ProcessGroup(rank=1, world_size=2, local_world_size=2)
        >>> metrics_port_of(TrainConfig(lake="lake", metrics_port=9490), group)
        9491
    """
    if config.metrics_port == 0:
        return 0
    env = os.environ if environ is None else environ
    local = env.get("LOCAL_RANK")
    try:
        local_rank = int(local) if local is not None else group.rank % group.local_world_size
    except ValueError:
        local_rank = -1
    if local_rank < 0:
        raise PiTrainError(f"LOCAL_RANK must be an integer >= 0 (the rank on this host), got {local!r}")
    port = config.metrics_port + local_rank
    if not 1 <= port <= 65535:
        raise PiTrainError(
            f"metrics port {config.metrics_port} + local rank {local_rank} = {port} is not a TCP port "
            "(1-65535): pass a lower --metrics-port"
        )
    return port


class LiveMetrics:
    """This rank's step-time series, served on `port` until `close()`.

    Args:
        port: the TCP port to serve on (all interfaces: a cluster's Prometheus scrapes the pod).
        rank: the label every series carries.
        global_batch: samples per step over all ranks (samples/s is this / step time).
        framework: shown in `pilake_train_info`.
        world_size: shown in `pilake_train_info`.
        window_steps: steps per samples/s figure (the run's `log_every`).
        warmup_steps: this process's first steps, left out of the histograms.

    Raises:
        PiTrainError: the port is taken or cannot be bound (the message names it and the fix).

    Example:
        >>> with LiveMetrics(port=9490, rank=0, global_batch=32) as live:
        ...     live.observe(1, StepTimes(data_wait=0.01, h2d=0.0, compute=0.05, total=0.07))
    """

    def __init__(
        self,
        *,
        port: int,
        rank: int,
        global_batch: int,
        framework: str = "",
        world_size: int = 1,
        window_steps: int = 10,
        warmup_steps: int = 1,
    ) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

        self.registry = CollectorRegistry()
        self._rank = str(rank)
        self._global_batch = global_batch
        self._per_rank_batch = global_batch // max(world_size, 1)
        self._window_steps = window_steps
        self._warmup_left = warmup_steps
        self._window = [0, 0.0]  # steps, seconds
        r = self.registry
        self._parts = Histogram(
            "pilake_train_step_seconds",
            "Seconds of each part of a training step on this rank (warm-up step left out): data_wait "
            "(waiting for the loader), h2d (the copy to the device compute did not hide), compute, "
            "checkpoint, eval, other (logging, the loop), total.",
            ["rank", "part"],
            buckets=BUCKETS,
            registry=r,
        )
        self._warmup = Gauge(
            "pilake_train_warmup_seconds",
            "Seconds of each part of this process's first step (JIT compilation, worker start-up).",
            ["rank", "part"],
            registry=r,
        )
        self._steps = Counter("pilake_train_steps", "Training steps this process ran.", ["rank"], registry=r)
        self._step = Gauge("pilake_train_step", "The step this rank has reached.", ["rank"], registry=r)
        self._samples = Counter("pilake_train_samples", "Samples this rank trained on.", ["rank"], registry=r)
        self._rate = Gauge(
            "pilake_train_samples_per_second",
            "Global samples per second (global batch / this rank's step time) over the last "
            "log_every steps; PromQL: sum(rate(pilake_train_samples_total[5m])) needs no window.",
            ["rank"],
            registry=r,
        )
        info = Gauge(
            "pilake_train_info",
            "1, with the run's framework and world size.",
            ["rank", "framework", "world_size"],
            registry=r,
        )
        info.labels(self._rank, framework, str(world_size)).set(1)
        for part in LIVE_PARTS:  # every series exists from the start, so a rule sees 0, not nothing
            self._parts.labels(self._rank, part)
        self._steps.labels(self._rank)
        self._samples.labels(self._rank)
        try:
            self._server, self._thread = start_http_server(port, registry=r)
        except OSError as err:
            raise PiTrainError(
                f"cannot serve training metrics on port {port} (rank {rank}): {err.strerror or err}; "
                "another process holds it: pass another --metrics-port (rank r of a host serves on "
                "that port + its local rank), or --metrics-port 0 to serve none"
            ) from err
        self.port = int(self._server.server_port)

    def observe_eval(self, record: Mapping[str, Any] | None) -> None:
        """Record one evaluation from its record (`pi_train._eval`'s, with `eval_s` seconds);
        None (no evaluation at this step) records nothing."""
        if record is not None:
            self._parts.labels(self._rank, "eval").observe(max(float(record["eval_s"]), 0.0))

    def observe(self, step: int, times: StepTimes) -> None:
        """Record one finished step (`step` is the step reached)."""
        rank = self._rank
        self._steps.labels(rank).inc()
        self._samples.labels(rank).inc(self._per_rank_batch)
        self._step.labels(rank).set(step)
        values = {
            "data_wait": times.data_wait,
            "h2d": times.h2d,
            "compute": times.compute,
            "checkpoint": times.checkpoint,
            "other": times.other,
            "total": times.total,
        }
        if self._warmup_left > 0:
            self._warmup_left -= 1
            for part, seconds in values.items():
                self._warmup.labels(rank, part).set(seconds)
            return
        for part, seconds in values.items():
            self._parts.labels(rank, part).observe(seconds)
        self._window[0] += 1
        self._window[1] += times.total
        if self._window[0] >= self._window_steps:
            steps, seconds = self._window
            if seconds > 0:
                self._rate.labels(rank).set(self._global_batch * steps / seconds)
            self._window = [0, 0.0]

    def close(self) -> None:
        """Stop serving (the port is free again)."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> LiveMetrics:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class MetricsOff:
    """What `live_metrics` yields when metrics are off (port 0): every call does nothing.

    Example:
        >>> MetricsOff().observe(1, StepTimes(data_wait=0.0, h2d=0.0, compute=0.1, total=0.1))
    """

    port = 0

    def observe_eval(self, record: Mapping[str, Any] | None) -> None:
        pass

    def observe(self, step: int, times: StepTimes) -> None:
        pass


@contextlib.contextmanager
def live_metrics(config: TrainConfig, group: ProcessGroup) -> Iterator[LiveMetrics | MetricsOff]:
    """This rank's live metrics for the run of `config`, served while the block runs (a
    do-nothing stand-in when `config.metrics_port` is 0).

    Raises:
        PiTrainError: the rank's port is taken (see `LiveMetrics`).

    Example:
        >>> with live_metrics(config, group) as live:
        ...     live.observe(step, times)
    """
    port = metrics_port_of(config, group)
    if port == 0:
        yield MetricsOff()
        return
    with LiveMetrics(
        port=port,
        rank=group.rank,
        global_batch=config.batch_size * group.world_size,
        framework=config.framework,
        world_size=group.world_size,
        window_steps=config.log_every,
    ) as live:
        yield live
