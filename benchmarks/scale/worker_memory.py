"""Loader worker memory, small lake vs big lake, with the workers' heap trim on and off
(issue 33 item 3: worker memory within +-10% of the 1,000-episode lake's).

    nice -n 19 python -m benchmarks.scale.worker_memory --small /tmp/d_lake1k16/lake \
        --big /work/scale1m/run/home/lake --repeats 3 --out benchmarks/baselines/worker_memory.json

Grow the small lake with the big lake's `benchmarks.scale._grow.GrowConfig` (same frame size and
episode length): a worker's batch slots hold frames, so a lake of bigger frames has bigger
workers whatever its size (a 64x64 1,000-episode lake: 10 MB more RssShmem than the 16x16 big one).

Each leg is a fresh process on a warm host (the lake's per-host indexes built once, by a first
leg taking the same batches, recorded as `host_warmup_legs`: on the big lake that is where the
files are indexed and glibc keeps hundreds of MB without the trim): it opens `pi_loader.Dataset`,
takes `--batches` shuffled batches through a `pi_loader.Loader` with `--workers` workers and the
scale probe's cache settings
(benchmarks/scale/_probe.py: chunk cache 64, episode cache 32, default footer and steps caches),
then reads each worker's memory: VmHWM (peak RSS: the figure `scale.json` judges), VmRSS,
RssAnon (private heap), RssFile (mapped files: libraries, this host's file indexes), RssShmem
(pages of the batch slots, and of the shared Dataset image where there is one, it has touched:
shared with every other worker and the main process, counted once per host), USS and PSS
(psutil, smaps_rollup). `PILAKE_LOADER_HEAP_TRIM` is "off" or unset (the default budget) per
leg (pi_loader.delivery._heap), and the loader's own count of trims, their CPU and the bytes
they returned are recorded. With `--cold-host` every leg gets a fresh host index directory
instead (its workers index every file they read: the case where glibc keeps the most). Legs
alternate (small/big x off/on) inside each repeat, so load drifts hit all alike. Ratios big/small
are taken repeat by repeat, per trim setting.

Workers hold no per-episode array of the selection: each task carries its batch's episodes' rows
(pi_loader.delivery._batch_episodes). What that costs the main process is measured per leg:
`EpisodeTable.rows` for the leg's own batches, repeated, with and without the task queue's
pickling (`main_rows_us_per_batch`, thread CPU).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.scale._legs import prefixed_result, worst_worker

PREFIX = "WORKER_MEMORY_RESULT "
FIELDS = ("hwm_mb", "rss_mb", "rss_anon_mb", "rss_file_mb", "rss_shmem_mb", "uss_mb", "pss_mb")


def _status_mb(pid: int, field: str) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _leg(args: argparse.Namespace) -> dict[str, Any]:
    import pi_loader
    import psutil  # type: ignore[import-untyped]

    from benchmarks.scale._probe import worker_pids

    # pinned to what the host warm-up read: a lake compacted meanwhile (the big one may be)
    # would hand a leg files the warm-up never indexed
    pinned = pi_loader.Snapshot.load(args.snapshot) if args.snapshot else None
    ds = pi_loader.Dataset(
        args.lake,
        snapshot=pinned,
        seed=0,
        action_horizon=10,
        chunk_cache_size=args.chunk_cache,
        episode_cache_size=32,
    )
    if args.save_snapshot:
        ds.snapshot.save(args.save_snapshot)
    loader = pi_loader.Loader(
        ds, batch_size=args.batch_size, shard=pi_loader.ShardSpec(index=0, count=1), num_workers=args.workers
    )
    cpu0 = psutil.Process().cpu_times()
    it = iter(loader)
    for _ in range(args.batches):
        next(it)
    workers = []
    for pid in worker_pids():
        info = psutil.Process(pid).memory_full_info()
        workers.append(
            {
                "hwm_mb": round(_status_mb(pid, "VmHWM"), 1),
                "rss_mb": round(_status_mb(pid, "VmRSS"), 1),
                "rss_anon_mb": round(_status_mb(pid, "RssAnon"), 1),
                "rss_file_mb": round(_status_mb(pid, "RssFile"), 1),
                "rss_shmem_mb": round(_status_mb(pid, "RssShmem"), 1),
                "uss_mb": round(info.uss / 2**20, 1),
                "pss_mb": round(info.pss / 2**20, 1),
                "cpu_s": round(sum(psutil.Process(pid).cpu_times()[:2]), 2),
            }
        )
    stats = loader.stats()
    loader.close()
    del cpu0
    rows_us = _rows_cost_us(ds, args.batches, args.batch_size)
    return {
        "episodes": len(ds.episode_ids),
        "table_versions": ds.table_versions,  # the big lake may be compacted meanwhile
        "samples": stats.samples,
        "workers": workers,
        "heap_trims": stats.heap_trims,
        "heap_trim_cpu_ms": round(stats.heap_trim_cpu_us / 1000, 2),
        "heap_trim_returned_mb": round(stats.heap_trim_returned_bytes / 2**20, 1),
        "main_rows_us_per_batch": rows_us,
    }


def _rows_cost_us(ds: Any, batches: int, batch_size: int) -> dict[str, float]:
    """Main-process CPU (this thread) of the per-batch episode rows a task carries, in us per
    batch: the leg's shuffled batches (seed 0, epoch 0), each made 20 times, median of 5 rounds;
    "rows" makes them, "rows_and_pickle" also pickles them as the task queue does."""
    from multiprocessing.reduction import ForkingPickler

    from pi_loader.delivery._batch_episodes import EpisodeTable
    from pi_loader.order._order import sample_order

    table = EpisodeTable(ds)
    order = sample_order(len(ds), seed=0, epoch=0)[: batches * batch_size]
    work = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    out: dict[str, float] = {}
    for label, pickled in (("rows", False), ("rows_and_pickle", True)):
        rounds = []
        for _ in range(5):
            t0 = time.thread_time()
            for _ in range(20):
                for flat in work:
                    rows = table.rows(flat)
                    if pickled:
                        ForkingPickler.dumps(rows)
            rounds.append((time.thread_time() - t0) / (20 * len(work)) * 1e6)
        out[label] = round(statistics.median(rounds), 1)
    return out


def run_leg(
    lake: str, trim: str, host: Path, args: argparse.Namespace, snapshot: tuple[str, Path] | None = None
) -> dict[str, Any]:
    """One leg in a fresh process; `snapshot`: ("--snapshot" or "--save-snapshot", path)."""
    cmd = [sys.executable, "-m", "benchmarks.scale.worker_memory", "--leg", "--lake", lake]
    if snapshot is not None:
        cmd += [snapshot[0], str(snapshot[1])]
    cmd += ["--workers", str(args.workers), "--batches", str(args.batches)]
    cmd += ["--batch-size", str(args.batch_size), "--chunk-cache", str(args.chunk_cache)]
    env = {**os.environ, "TMPDIR": str(host), "OPENBLAS_NUM_THREADS": "1"}
    env.pop("PILAKE_LOADER_HEAP_TRIM", None)
    if trim == "off":
        env["PILAKE_LOADER_HEAP_TRIM"] = "off"
    return prefixed_result(cmd, env, PREFIX, f"leg on {lake} (trim {trim})")


def _spread(values: list[float]) -> dict[str, Any]:
    return {
        "median": round(statistics.median(values), 3),
        "min": round(min(values), 3),
        "max": round(max(values), 3),
        "values": [round(v, 3) for v in values],
    }


def summarize(legs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for trim in ("off", "on"):
        mine = {
            lake: [g for g in legs if g["trim"] == trim and g["lake"] == lake] for lake in ("small", "big")
        }
        block: dict[str, Any] = {}
        for lake, got in mine.items():
            block[lake] = {f"worker_{key}": _spread([worst_worker(g, key) for g in got]) for key in FIELDS}
            block[lake]["heap_trims"] = _spread([g["heap_trims"] for g in got])
            block[lake]["heap_trim_cpu_ms"] = _spread([g["heap_trim_cpu_ms"] for g in got])
            if all("main_rows_us_per_batch" in g for g in got):
                for part in ("rows", "rows_and_pickle"):
                    block[lake][f"main_{part}_us_per_batch"] = _spread(
                        [g["main_rows_us_per_batch"][part] for g in got]
                    )
        for key in FIELDS:
            ratios = [
                worst_worker(b, key) / worst_worker(s, key)
                for s in mine["small"]
                for b in mine["big"]
                if s["repeat"] == b["repeat"]
            ]
            spread = _spread(ratios)
            block[f"worker_{key}_big_vs_small"] = {
                **spread,
                "within_10pct": all(abs(spread[k] - 1) <= 0.10 for k in ("min", "max")),
            }
        out[f"trim_{trim}"] = block
    return out


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--leg", action="store_true")
    parser.add_argument("--lake")
    parser.add_argument("--snapshot", help="(a leg) open this saved snapshot")
    parser.add_argument("--save-snapshot", help="(a leg) save the snapshot it opened here")
    parser.add_argument("--small")
    parser.add_argument("--big")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batches", type=int, default=40)  # million.py's --probe-batches
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--chunk-cache", type=int, default=64)
    parser.add_argument(
        "--cold-host",
        action="store_true",
        help="every leg on a fresh host index directory: the workers index each file they read "
        "(where glibc keeps the most), instead of one warmed host per lake",
    )
    parser.add_argument("--out", type=Path)
    parser.add_argument("--note", default="")
    args = parser.parse_args()
    if args.leg:
        print(PREFIX + json.dumps(_leg(args)), flush=True)
        return 0
    if not (args.small and args.big):
        parser.error("--small and --big (lake roots) are required")
    lakes = {"small": args.small, "big": args.big}
    hosts = {label: Path(tempfile.mkdtemp(prefix=f"worker-memory-{label}-")) for label in lakes}
    started = time.monotonic()
    warmups: dict[str, Any] = {}
    for label, lake in lakes.items() if not args.cold_host else ():
        # the per-host indexes of every file the legs read, built once (not a leg): each leg
        # takes the same batches (seed 0, epoch 0)
        warm = run_leg(lake, "on", hosts[label], args, ("--save-snapshot", hosts[label] / "pinned.json"))
        print(
            f"{label}: host warmed ({warm['heap_trims']} trims, {warm['heap_trim_cpu_ms']} ms CPU, "
            f"{warm['heap_trim_returned_mb']} MB back; workers "
            + ", ".join(f"{w['rss_anon_mb']} MB anon" for w in warm["workers"])
            + ")",
            flush=True,
        )
        warmups[label] = warm
    legs: list[dict[str, Any]] = []
    for repeat in range(args.repeats):
        order = [("small", "off"), ("big", "off"), ("small", "on"), ("big", "on")]
        if repeat % 2:
            order.reverse()
        for label, trim in order:
            result: dict[str, Any] = {
                "repeat": repeat,
                "lake": label,
                "trim": trim,
                "load_1m": os.getloadavg()[0],
            }
            host = Path(tempfile.mkdtemp(prefix="worker-memory-cold-")) if args.cold_host else hosts[label]
            try:
                pin = None if args.cold_host else ("--snapshot", hosts[label] / "pinned.json")
                result.update(run_leg(lakes[label], trim, host, args, pin))
            finally:
                if args.cold_host:
                    shutil.rmtree(host, ignore_errors=True)
            legs.append(result)
            print(
                f"repeat {repeat} {label} ({result['episodes']:,} episodes) trim {trim}: "
                + "; ".join(f"{k} " + ", ".join(str(w[k]) for w in result["workers"]) for k in FIELDS)
                + f"; trims {result['heap_trims']} ({result['heap_trim_cpu_ms']} ms CPU, "
                f"{result['heap_trim_returned_mb']} MB back) (load {result['load_1m']:.1f})",
                flush=True,
            )
    summary = summarize(legs)
    print(json.dumps(summary, indent=1))
    if args.out is not None:
        doc = {
            "what": "loader worker memory, small vs big lake, heap trim off/on "
            "(benchmarks/scale/worker_memory.py)",
            "note": args.note,
            "lakes": lakes,
            "workers": args.workers,
            "batches": args.batches,
            "batch_size": args.batch_size,
            "chunk_cache": args.chunk_cache,
            "repeats": args.repeats,
            "host": "cold (a fresh host index directory per leg)" if args.cold_host else "warm",
            "elapsed_s": round(time.monotonic() - started, 1),
            "summary": summary,
            "legs": legs,
            "host_warmup_legs": warmups,
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
