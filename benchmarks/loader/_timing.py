"""The measuring loop every leg runs, in whichever venv it runs (stdlib only, no pi-lake import).

A leg opens its loader, then calls `measure` with a zero-argument factory of batch iterators.
The first batch is timed from the leg's process start (the parent passes its spawn time on the
system-wide monotonic clock); the first `warmup_batches` are not counted; then batches are
counted until `measure_s` has passed, going on into new epochs (a fresh iterator from the
factory) when one ends, so the batches a loader had prefetched before the window opened are
matched by those it holds when the window closes. The leg prints one JSON line prefixed with
RESULT_PREFIX, which the parent reads.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

RESULT_PREFIX = "LEG-RESULT "


def tree_cpu_s() -> float | None:
    """CPU seconds (user + system) used so far by this process and its live descendants.

    On a shared machine wall-clock rates move with other people's load; CPU per sample moves
    much less, so legs report both. None when psutil is not installed.
    """
    try:
        import psutil  # type: ignore[import-untyped]
    except ImportError:
        return None
    me = psutil.Process()
    total = 0.0
    for p in [me, *me.children(recursive=True)]:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.Error:  # a worker that just exited
            pass
    return total


def measure(
    batches: Callable[[], Iterable[Any]],
    *,
    batch_len: Callable[[Any], int],
    spawned_at: float,
    opened_at: float,
    warmup_batches: int,
    measure_s: float,
    check: Callable[[Any], dict[str, Any]] | None = None,
    in_flight_depth: Callable[[], int] | None = None,
) -> dict[str, Any]:
    """Time one loader: first batch, then steady-state samples/s over `measure_s` seconds.

    `in_flight_depth` (optional) reads how many batches the loader keeps in flight; it is
    recorded at the window's start and end. The window's CPU includes the work on the batches in
    flight when it closes and leaves out the work on those in flight when it opened: equal only
    when the depth is the same at both ends, so warm up past the depth's growth (pi_loader grows
    it while its consumer waits: 4 -> 8 batches at 2 workers, a few per-cent of a short window's
    CPU when it grows inside it; benchmarks/loader/PROFILE.md, fourth pass).

    Example:
        >>> result = measure(lambda: loader, batch_len=lambda b: len(b["action"]),
        ...                  spawned_at=t0, opened_at=t1, warmup_batches=3, measure_s=10.0)
    """
    it: Iterator[Any] = iter(batches())
    first = next(it)
    first_at = time.monotonic()
    shapes = check(first) if check is not None else {}
    seen = batch_len(first)
    for _ in range(max(warmup_batches - 1, 0)):
        seen += batch_len(next(it))
    depth_start = in_flight_depth() if in_flight_depth is not None else None
    cpu_start = tree_cpu_s()
    start = time.monotonic()
    samples = 0
    epochs_started = 0
    while time.monotonic() - start < measure_s:
        try:
            batch = next(it)
        except StopIteration:
            it = iter(batches())
            epochs_started += 1
            continue
        samples += batch_len(batch)
    elapsed = time.monotonic() - start
    cpu_end = tree_cpu_s()
    depth_end = in_flight_depth() if in_flight_depth is not None else None
    cpu_ms = None
    if cpu_start is not None and cpu_end is not None and samples:
        cpu_ms = (cpu_end - cpu_start) * 1e3 / samples
    return {
        "cpu_ms_per_sample": cpu_ms,
        "samples_per_s": samples / elapsed if elapsed > 0 else 0.0,
        "measured_samples": samples,
        "measured_s": elapsed,
        "epochs_started_while_measuring": epochs_started,
        "in_flight_depth_at_start": depth_start,
        "in_flight_depth_at_end": depth_end,
        "warmup_samples": seen,
        "first_batch_from_spawn_s": first_at - spawned_at,
        "first_batch_from_open_s": first_at - opened_at,
        "open_s": opened_at - spawned_at,
        "first_batch": shapes,
    }


def report(result: dict[str, Any]) -> None:
    """Print the leg's result as the one line the parent parses."""
    print(RESULT_PREFIX + json.dumps(result), flush=True)


def shape_of(value: Any) -> list[int]:
    """Shape of a tensor/array (or [len] of a list), for the first-batch sanity check."""
    shape = getattr(value, "shape", None)
    return [int(s) for s in shape] if shape is not None else [len(value)]
