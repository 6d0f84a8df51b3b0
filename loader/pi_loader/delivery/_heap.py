"""Freed heap given back to the OS in loader workers, where glibc is the allocator.

A worker that reads a new steps or video file parses its footer and row groups into buffers it
frees once the batch is built; glibc keeps freed memory inside its heap (only the heap's top is
returned, and only above M_TRIM_THRESHOLD), so a worker sampling over a big lake's hundreds of
files holds the high-water mark of every file it ever read: ~11 MB per video file read at
800,000 episodes, private to each worker (benchmarks/scale/read_side.py: worker USS x5 the
1,000-episode lake's). `malloc_trim(0)` hands every free page inside the heap back
(`madvise(MADV_DONTNEED)`), not only its top.

`HeapTrimmer.after_batch` runs after each batch a worker sends: it reads the process's anonymous
resident memory from /proc/self/statm (one small read, ~5 us) and calls `malloc_trim(0)` only
when it grew more than `TrimPolicy.budget_bytes` above what the last trim left, so a worker whose
heap is steady (its caches full, no new files) never pays for a trim or for faulting the
returned pages in again. Where glibc is not the C library (musl, macOS, Windows) or /proc is
absent, the trimmer does nothing and says why (`HeapTrimmer.why_not`): other allocators return
memory by their own rules.

Set `PILAKE_LOADER_HEAP_TRIM=off` to turn it off, or to a budget in MB (0: trim after every batch);
the main process reads it when a `Loader` starts its workers.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform
import time
from dataclasses import dataclass
from typing import Any

TRIM_ENV = "PILAKE_LOADER_HEAP_TRIM"
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


@dataclass(frozen=True, slots=True)
class TrimPolicy:
    """When a worker gives freed heap back.

    Attributes:
        enabled: trim at all (False: glibc's own rules only).
        budget_bytes: anonymous memory a worker may gain over what its last trim left before it
            trims again. 16 MB: above one new file's parse (~11 MB for a video file at 800,000
            episodes), so reading files already cached never triggers a trim, and a worker's
            memory stays within 16 MB of its floor at any lake size (the scale target is +-10%
            of ~80 MB).

    Example:
        >>> TrimPolicy(budget_bytes=8 * 2**20).enabled
        True
    """

    enabled: bool = True
    budget_bytes: int = 16 * 2**20

    def __post_init__(self) -> None:
        if self.budget_bytes < 0:
            raise ValueError(f"TrimPolicy.budget_bytes must be >= 0, got {self.budget_bytes}")

    @staticmethod
    def from_env(environ: dict[str, str] | None = None) -> TrimPolicy:
        """The policy `PILAKE_LOADER_HEAP_TRIM` asks for: "off", a budget in MB, or unset (default).

        Raises:
            ValueError: a value that is neither "off" nor a number of MB >= 0.
        """
        raw = (os.environ if environ is None else environ).get(TRIM_ENV, "").strip().lower()
        if not raw:
            return TrimPolicy()
        if raw in ("off", "false", "no"):
            return TrimPolicy(enabled=False)
        try:
            mb = float(raw)
        except ValueError:
            mb = -1.0
        if mb < 0:
            raise ValueError(f"{TRIM_ENV}={raw!r}: expected 'off' or a budget in MB >= 0 (e.g. 16)")
        return TrimPolicy(budget_bytes=int(mb * 2**20))


def _glibc_malloc_trim() -> tuple[Any | None, str | None]:
    """(malloc_trim, None) where glibc is this process's C library, else (None, why not)."""
    name, _ = platform.libc_ver()
    if name != "glibc":
        return None, f"the C library is not glibc ({name or 'unknown'}): its allocator returns memory itself"
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError) as err:
        return None, f"glibc's malloc_trim is not callable here ({err})"
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim, None


def anon_resident_bytes() -> int | None:
    """This process's resident memory that is not file-backed or shared (RSS - shared pages of
    /proc/self/statm: its heap, stacks and private maps); None without /proc."""
    try:
        with open("/proc/self/statm", "rb") as f:
            fields = f.read().split()
    except OSError:
        return None
    return (int(fields[1]) - int(fields[2])) * _PAGE


class HeapTrimmer:
    """Calls glibc's `malloc_trim(0)` after a batch when the worker's anonymous memory grew more
    than the policy's budget since the last trim; a no-op where glibc or /proc is missing.

    Args:
        policy: when to trim (`TrimPolicy.from_env()` in a worker).
        trim: the trim function to call with 0 (default: glibc's malloc_trim, found at start);
            None forces the no-op path (as on musl or macOS).

    Example:
        >>> trimmer = HeapTrimmer(TrimPolicy())
        >>> trimmer.after_batch()        # True when it trimmed
        False
        >>> trimmer.trims, trimmer.trim_cpu_us, trimmer.why_not   # why_not: None where glibc is
        (0, 0, None)
    """

    _DEFAULT: Any = object()

    def __init__(self, policy: TrimPolicy, *, trim: Any = _DEFAULT) -> None:
        self.policy = policy
        why: str | None
        if trim is HeapTrimmer._DEFAULT:
            trim, why = _glibc_malloc_trim()
        else:
            why = None if trim is not None else "no malloc_trim given"
        if trim is not None and anon_resident_bytes() is None:
            trim, why = None, "/proc/self/statm is not readable: no way to see the heap grow"
        if not policy.enabled:
            trim, why = None, f"turned off ({TRIM_ENV}=off)"
        self._trim = trim
        self.why_not: str | None = why  # None: trimming is live
        # anonymous bytes the last trim left, or the worker's at its start: a first batch that
        # indexes files on a cold host (hundreds of MB freed again) is trimmed like any other
        self._floor: int | None = anon_resident_bytes() if trim is not None else None
        self.trims = 0
        self.trim_cpu_us = 0  # thread CPU spent inside malloc_trim, microseconds
        self.returned_bytes = 0  # anonymous memory the trims took off the worker (statm before - after)

    @property
    def available(self) -> bool:
        """Whether `after_batch` can trim (glibc, /proc, and not turned off)."""
        return self._trim is not None

    def after_batch(self) -> bool:
        """Trim when the worker's anonymous memory is more than the budget above its floor;
        returns whether it trimmed."""
        if self._trim is None:
            return False
        now = anon_resident_bytes()
        if now is None:
            return False
        if self._floor is None or now < self._floor:
            self._floor = now
        if now - self._floor <= self.policy.budget_bytes and self.policy.budget_bytes > 0:
            return False
        start = time.thread_time_ns()
        self._trim(0)
        self.trim_cpu_us += (time.thread_time_ns() - start) // 1000
        after = anon_resident_bytes()
        self.trims += 1
        if after is not None:
            self.returned_bytes += max(0, now - after)
            # what is left is the new floor: caches that grew stay, and only new growth trims again
            self._floor = after
        return True

    def counters(self) -> dict[str, int]:
        """Totals for `Loader.stats()` (summed over workers): trims, their CPU, bytes returned."""
        return {
            "heap_trims": self.trims,
            "heap_trim_cpu_us": self.trim_cpu_us,
            "heap_trim_returned_bytes": self.returned_bytes,
        }
