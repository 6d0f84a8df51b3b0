"""Loader workers give freed heap back to the OS where glibc is the allocator
(`pi_loader.delivery._heap`): the memory a worker freed after reading a file leaves its RSS once
it is more than the budget, the trim runs in the real worker loop, and where there is no glibc
(or it is turned off) nothing is called and the trimmer says why."""

from __future__ import annotations

import ctypes
import multiprocessing as mp
import platform
from typing import Any

import numpy as np
import pytest
from pi_loader import Dataset, Loader, ShardSpec
from pi_loader.delivery._heap import TRIM_ENV, HeapTrimmer, TrimPolicy, anon_resident_bytes

from tests.fixtures.lake_factory import FakeLake

GLIBC = platform.libc_ver()[0] == "glibc" and anon_resident_bytes() is not None
needs_glibc = pytest.mark.skipif(not GLIBC, reason="glibc's malloc_trim and /proc/self/statm (Linux/glibc)")

MB = 2**20
BLOCK = 1000  # bytes: small blocks come from the heap (brk), never from their own mmap
HELD_MB = 64  # freed, but kept by glibc: the last block pins the heap's top


def _churn_then_trim(budget_mb: int, use_trim: bool, out: Any) -> None:
    # In a fresh process: what reading a file leaves behind, then the worker's after-batch step.
    libc = ctypes.CDLL("libc.so.6")
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    trimmer = HeapTrimmer(
        TrimPolicy(budget_bytes=budget_mb * MB), trim=None if not use_trim else HeapTrimmer._DEFAULT
    )
    start = anon_resident_bytes()  # the floor: the trimmer was made at the worker's start
    blocks = [libc.malloc(BLOCK) for _ in range(HELD_MB * MB // BLOCK)]
    for b in blocks:
        ctypes.memset(b, 1, BLOCK)  # touched, as a parse would
    pin = libc.malloc(BLOCK)  # allocated after them: the heap's top cannot shrink past it
    for b in blocks:
        libc.free(b)
    held = anon_resident_bytes()
    trimmed = trimmer.after_batch()
    after = anon_resident_bytes()
    libc.free(pin)
    out.put(
        {
            "start": start,
            "held": held,
            "after": after,
            "trimmed": trimmed,
            "counters": trimmer.counters(),
            "why_not": trimmer.why_not,
        }
    )


def _run(budget_mb: int, use_trim: bool) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    proc = ctx.Process(target=_churn_then_trim, args=(budget_mb, use_trim, out))
    proc.start()
    got = out.get(timeout=120)
    proc.join(timeout=30)
    return dict(got)


@needs_glibc
def test_freed_heap_over_the_budget_leaves_the_process() -> None:
    # the worker's first batch (a cold host indexes every file it reads: the largest churn) is
    # already measured against the memory the worker started with
    got = _run(budget_mb=16, use_trim=True)
    # glibc kept what was freed (what the trim is for): most of the 64 MB still resident ...
    assert got["held"] - got["start"] >= 0.8 * HELD_MB * MB
    # ... and after the worker's step, the process is back within the budget of where it began
    assert got["trimmed"] is True and got["why_not"] is None
    assert got["after"] - got["start"] <= 16 * MB
    assert got["counters"]["heap_trims"] == 1
    assert got["counters"]["heap_trim_returned_bytes"] >= (HELD_MB - 16) * MB


@needs_glibc
def test_without_the_trim_the_freed_heap_stays() -> None:
    # the same churn with the no-op path (as on musl or macOS): nothing is returned, nothing called
    got = _run(budget_mb=16, use_trim=False)
    assert got["trimmed"] is False and got["why_not"]
    assert got["after"] - got["start"] >= 0.8 * HELD_MB * MB
    assert got["counters"] == {"heap_trims": 0, "heap_trim_cpu_us": 0, "heap_trim_returned_bytes": 0}


def test_growth_within_the_budget_is_not_trimmed() -> None:
    calls: list[int] = []
    trimmer = HeapTrimmer(TrimPolicy(budget_bytes=1 << 40), trim=calls.append)
    for _ in range(5):
        assert trimmer.after_batch() is False
    assert calls == [] and trimmer.trims == 0


def test_budget_zero_trims_after_every_batch_where_proc_is_readable() -> None:
    calls: list[int] = []
    trimmer = HeapTrimmer(TrimPolicy(budget_bytes=0), trim=calls.append)
    if anon_resident_bytes() is None:  # no /proc: the no-op path, said so
        assert not trimmer.available and "statm" in (trimmer.why_not or "")
        return
    for _ in range(3):
        assert trimmer.after_batch() is True
    assert calls == [0, 0, 0] and trimmer.trims == 3


def test_no_trim_function_is_a_no_op_that_says_why() -> None:
    trimmer = HeapTrimmer(TrimPolicy(), trim=None)
    assert not trimmer.available and trimmer.why_not
    assert trimmer.after_batch() is False
    off = HeapTrimmer(TrimPolicy(enabled=False))
    assert not off.available and TRIM_ENV in (off.why_not or "")


@pytest.mark.parametrize(
    ("value", "enabled", "budget"),
    [
        ("", True, 16 * MB),
        ("off", False, 16 * MB),
        ("OFF", False, 16 * MB),
        ("0", True, 0),
        ("2.5", True, int(2.5 * MB)),
    ],
)
def test_policy_from_env(value: str, enabled: bool, budget: int) -> None:
    policy = TrimPolicy.from_env({TRIM_ENV: value})
    assert (policy.enabled, policy.budget_bytes) == (enabled, budget)


@pytest.mark.parametrize("value", ["-1", "lots", "16MB", "nan-ish", "\x00", "1e400x"])
def test_policy_from_env_refuses_what_it_cannot_read(value: str) -> None:
    with pytest.raises(ValueError, match=TRIM_ENV):
        TrimPolicy.from_env({TRIM_ENV: value})


def test_negative_budget_refused() -> None:
    with pytest.raises(ValueError, match="budget_bytes"):
        TrimPolicy(budget_bytes=-1)


@pytest.mark.parametrize("setting", ["0", "off"])
def test_the_worker_loop_trims_after_its_batches(
    loader_lake: FakeLake, monkeypatch: pytest.MonkeyPatch, setting: str
) -> None:
    # the real Loader and worker: with a budget of 0 every batch's heap is trimmed (counted by
    # LoaderStats, summed over the workers); "off" (and no glibc) never calls it
    monkeypatch.setenv(TRIM_ENV, setting)
    ds = Dataset(loader_lake.layout, seed=0, action_horizon=2)
    loader = Loader(ds, batch_size=4, shard=ShardSpec(index=0, count=1), num_workers=1, mp_context="spawn")
    try:
        batches = [b for _, b in zip(range(6), loader, strict=False)]
        assert len(batches) == 6 and all(len(b["action"]) == 4 for b in batches)
        # the same batches as without workers: the trim touches no data
        inline = Loader(ds, batch_size=4, shard=ShardSpec(index=0, count=1), num_workers=0)
        for mine, theirs in zip(batches, inline, strict=False):
            for key in ("action", "step"):
                np.testing.assert_array_equal(mine[key], theirs[key])
        stats = loader.stats()
    finally:
        loader.close()
    if setting == "off" or not GLIBC:
        assert stats.heap_trims == 0 and stats.heap_trim_cpu_us == 0
    else:
        # a trim after each batch sent; the last one's is counted with the batch after it
        assert stats.heap_trims >= 4
