"""How much work the Loader keeps in flight: enough for every worker, bounded by memory.

A worker can only work on a batch it was sent, so the number of batches in flight caps how
many workers are busy: a fixed depth of 4 kept 4 of 14 workers working on a 16-core GPU host
(issue 23: 2,546 samples/s of an 11,224 decode limit at 14 workers). The depth here starts at
twice the workers (one batch being built, one queued, per worker), grows while the consumer
still finds no batch ready (workers slower than expected, or uneven), and never passes what
the memory budget allows (`prefetch_bytes` over the batch's bytes). Pure arithmetic, no I/O.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

# Cores left to the training process itself (its Python loop, the device feed's thread and
# the framework's own threads). A 16-core host gets 14 workers, the figure issue 23 measured.
RESERVED_CORES = 2
# Workers beyond this rarely help one host (each holds its own caches) and cost memory.
MAX_DEFAULT_WORKERS = 32
# Bytes of batches in flight by default: 2 GiB, or a tenth of the host's memory if smaller.
# A batch of 32 samples x 3 cameras x 224x224 RGB is 14.4 MB: 2 GiB holds 149 of them.
DEFAULT_PREFETCH_BYTES = 2 * 2**30
# Depth per worker at most: beyond ~4 queued batches a worker's share only adds latency.
MAX_DEPTH_PER_WORKER = 4


def host_cores() -> int:
    """Cores this process may run on (the affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def default_num_workers(cores: int | None = None) -> int:
    """Workers for a host of `cores` cores: all but `RESERVED_CORES`, at least 1.

    Example:
        >>> default_num_workers(16), default_num_workers(2)
        (14, 1)
    """
    n = host_cores() if cores is None else cores
    return max(1, min(n - RESERVED_CORES, MAX_DEFAULT_WORKERS))


def default_prefetch_bytes() -> int:
    """`DEFAULT_PREFETCH_BYTES`, or a tenth of physical memory where that is smaller."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return DEFAULT_PREFETCH_BYTES
    return int(min(DEFAULT_PREFETCH_BYTES, max(total // 10, 64 * 2**20)))


@dataclass(frozen=True, slots=True)
class InFlightPlan:
    """Batches in flight: where the depth starts, how far it may grow, and what it idles.

    Args:
        initial: depth at the first batch.
        maximum: the most the depth may grow to (== initial for an explicit depth).
        num_workers: the workers it feeds.
        idle_workers: workers that can never be busy at `maximum` (0 unless a depth was set
            below the worker count, or the memory budget forced it).
        reason: why the depth is what it is, for `LoaderStats` and the warning.
    """

    initial: int
    maximum: int
    num_workers: int
    idle_workers: int
    reason: str

    def __post_init__(self) -> None:
        if not 1 <= self.initial <= self.maximum:
            raise ValueError(f"in-flight depth must satisfy 1 <= initial <= maximum, got {self}")

    def grow(self, depth: int) -> int:
        """The depth after the consumer waited for a batch: one more per half the workers."""
        return min(self.maximum, depth + max(1, self.num_workers // 2))


def plan_in_flight(
    *,
    num_workers: int,
    batch_bytes: int,
    prefetch_batches: int | None,
    prefetch_bytes: int | None,
) -> InFlightPlan:
    """The in-flight plan for `num_workers` workers building batches of ~`batch_bytes` bytes.

    `prefetch_batches` fixes the depth (reported when it idles workers); None sizes it from the
    workers, bounded by `prefetch_bytes` (None: `default_prefetch_bytes()`).

    Example:
        >>> plan_in_flight(num_workers=14, batch_bytes=14_450_000, prefetch_batches=None, prefetch_bytes=None)
        InFlightPlan(initial=28, maximum=56, num_workers=14, idle_workers=0, reason='auto: ...')
        >>> fixed = plan_in_flight(num_workers=14, batch_bytes=1, prefetch_batches=4, prefetch_bytes=None)
        >>> fixed.idle_workers
        10
    """
    if num_workers < 1:
        raise ValueError(f"num_workers must be >= 1 for an in-flight plan, got {num_workers}")
    if prefetch_batches is not None:
        idle = max(0, num_workers - prefetch_batches)
        reason = f"prefetch_batches={prefetch_batches} set by the caller"
        if idle:
            reason += (
                f": only {prefetch_batches} of {num_workers} workers can ever be busy; leave "
                "prefetch_batches=None to size it from the workers and the memory budget"
            )
        return InFlightPlan(prefetch_batches, prefetch_batches, num_workers, idle, reason)
    budget = default_prefetch_bytes() if prefetch_bytes is None else prefetch_bytes
    if budget < 1:
        raise ValueError(f"prefetch_bytes must be >= 1, got {budget}")
    fits = max(1, budget // max(batch_bytes, 1))
    maximum = max(1, min(MAX_DEPTH_PER_WORKER * num_workers, fits))
    initial = min(2 * num_workers, maximum)
    idle = max(0, num_workers - maximum)
    mib = batch_bytes / 2**20
    reason = f"auto: {initial} to {maximum} batches of ~{mib:.1f} MiB for {num_workers} workers"
    if idle:
        reason += (
            f"; the memory budget ({budget / 2**20:.0f} MiB) holds only {maximum} batches, so "
            f"{idle} workers idle: raise prefetch_bytes or lower the batch size"
        )
    return InFlightPlan(initial, maximum, num_workers, idle, reason)
