"""The read side of a big lake (issue 33 item 3): `Dataset` open on a cold and a warm host, and
what each loader worker holds, at a small lake and a big one, in interleaved legs.

    python -m benchmarks.scale.read_side --small /tmp/lake1k/lake --big /work/scale1m/run/home/lake \
        --repeats 3 --out benchmarks/baselines/scale_read.json

Every leg is a fresh process (cold per-process caches). Per repeat and per lake, in turn:

* "cold": opens `pi_loader.Dataset` on every visible episode with a fresh host index directory
  (TMPDIR: the loader keeps a local lake's per-host caches under it: the episodes rows segment,
  the open cache, the steps and chunk indexes), so the open reads every episodes file and builds
  them; the OS page cache is not dropped (that needs root and would time the disk, not the open);
* "warm": the same open again in a new process on that host index directory;
* "memory": on the warm host, a `pi_loader.Loader` with `--workers` workers takes `--batches`
  batches, then each worker's USS (private pages) and PSS (shared pages divided among the
  processes mapping them) are read from /proc/<pid>/smaps_rollup (psutil). RSS is printed too
  but is not the figure: it counts every page a worker maps from the Dataset image the main
  process shares (`pi_loader.delivery._shared_dataset`) in full, in every worker.

The legs of both lakes alternate inside each repeat, so load drifts hit both alike. The JSON holds
every leg and, per lake, the median and spread (min-max) of each figure, and the big lake's
worker USS/PSS as a ratio to the small one's (a target is met only when the whole spread of the
ratio, every big leg against every small leg of the same repeat, is within +-10%).
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

PREFIX = "READ_SIDE_RESULT "
MEMORY_TOLERANCE = 0.10
COLD_OPEN_LIMIT_S = 5.0


def _leg(args: argparse.Namespace) -> dict[str, Any]:
    """One leg in this process (the child side)."""
    import pi_loader

    start = time.perf_counter()
    ds = pi_loader.Dataset(
        args.lake,
        seed=0,
        action_horizon=args.horizon,
        chunk_cache_size=args.chunk_cache,
        episode_cache_size=args.episode_cache,
        steps_cache_bytes=args.steps_cache_bytes,
        footer_cache_bytes=args.footer_cache_bytes,
    )
    out: dict[str, Any] = {"open_s": round(time.perf_counter() - start, 3), "episodes": len(ds.episode_ids)}
    if args.leg != "memory":
        return out
    import psutil  # type: ignore[import-untyped]

    from benchmarks.scale._probe import worker_pids

    loader = pi_loader.Loader(
        ds, batch_size=args.batch_size, shard=pi_loader.ShardSpec(index=0, count=1), num_workers=args.workers
    )
    it = iter(loader)
    for _ in range(args.batches):
        next(it)
    workers = []
    for pid in worker_pids():
        info = psutil.Process(pid).memory_full_info()
        workers.append({"uss_mb": info.uss / 2**20, "pss_mb": info.pss / 2**20, "rss_mb": info.rss / 2**20})
    loader.close()
    out["workers"] = workers
    return out


def run_leg(leg: str, lake: str, host: Path, args: argparse.Namespace) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "benchmarks.scale.read_side", "--leg", leg, "--lake", lake]
    for flag in ("workers", "batches", "batch_size", "horizon", "footer_cache_bytes", "steps_cache_bytes"):
        cmd += [f"--{flag.replace('_', '-')}", str(getattr(args, flag))]
    cmd += ["--chunk-cache", str(args.chunk_cache), "--episode-cache", str(args.episode_cache)]
    env = {**os.environ, "TMPDIR": str(host), "OPENBLAS_NUM_THREADS": "1"}
    return prefixed_result(cmd, env, PREFIX, f"leg {leg} on {lake}")


def _spread(values: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), 3),
        "min": round(min(values), 3),
        "max": round(max(values), 3),
    }


def summarize(legs: list[dict[str, Any]], lakes: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for label in lakes:
        mine = [g for g in legs if g["lake"] == label]
        out[label] = {
            "episodes": mine[0]["episodes"],
            "open_cold_s": _spread([g["open_s"] for g in mine if g["leg"] == "cold"]),
            "open_warm_s": _spread([g["open_s"] for g in mine if g["leg"] == "warm"]),
            **{
                f"worker_{key}": _spread([worst_worker(g, key) for g in mine if g["leg"] == "memory"])
                for key in ("uss_mb", "pss_mb", "rss_mb")
            },
        }
    small = [g for g in legs if g["lake"] == "small" and g["leg"] == "memory"]
    big = [g for g in legs if g["lake"] == "big" and g["leg"] == "memory"]
    for key in ("uss_mb", "pss_mb", "rss_mb"):
        ratios = [
            worst_worker(b, key) / worst_worker(s, key)
            for s in small
            for b in big
            if s["repeat"] == b["repeat"]
        ]
        spread = _spread(ratios)
        out[f"worker_{key}_big_vs_small"] = {
            **spread,
            "within_10pct": all(abs(spread[k] - 1) <= MEMORY_TOLERANCE for k in ("min", "max")),
        }
    cold = out["big"]["open_cold_s"]
    out["big_open_cold_under_5s"] = bool(cold["max"] < COLD_OPEN_LIMIT_S)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--leg", choices=("cold", "warm", "memory"))
    parser.add_argument("--lake")
    parser.add_argument("--small")
    parser.add_argument("--big")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--horizon", type=int, default=10)
    # Small per-worker caches, the same at both lakes: a batch of random samples over a big lake
    # touches a new file per sample, and the default footer (128 MiB) and steps (64 MiB) caches
    # then fill, which a 1,000-episode lake's few files never do; that is bounded cache, not
    # memory that grows with the episodes, and would hide what does.
    parser.add_argument("--footer-cache-bytes", type=int, default=2 << 20)
    parser.add_argument("--steps-cache-bytes", type=int, default=2 << 20)
    parser.add_argument("--chunk-cache", type=int, default=4)
    parser.add_argument("--episode-cache", type=int, default=4)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--note", default="")
    args = parser.parse_args()
    if args.leg:
        print(PREFIX + json.dumps(_leg(args)), flush=True)
        return 0
    if not (args.small and args.big):
        parser.error("--small and --big (lake roots) are required")
    lakes = {"small": args.small, "big": args.big}
    legs: list[dict[str, Any]] = []
    started = time.monotonic()
    for repeat in range(args.repeats):
        for label, lake in lakes.items():
            host = Path(tempfile.mkdtemp(prefix="read-side-host-"))
            try:
                for leg in ("cold", "warm", "memory"):
                    result: dict[str, Any] = {
                        "repeat": repeat,
                        "lake": label,
                        "leg": leg,
                        "load_1m": os.getloadavg()[0],
                    }
                    result.update(run_leg(leg, lake, host, args))
                    legs.append(result)
                    mem = (
                        ""
                        if leg != "memory"
                        else " workers USS "
                        + ", ".join(f"{w['uss_mb']:.1f}" for w in result["workers"])
                        + " MB, PSS "
                        + ", ".join(f"{w['pss_mb']:.1f}" for w in result["workers"])
                        + " MB"
                    )
                    print(
                        f"repeat {repeat} {label} ({result['episodes']:,} episodes) {leg}: open "
                        f"{result['open_s']:.2f} s{mem} (load {result['load_1m']:.1f})",
                        flush=True,
                    )
            finally:
                shutil.rmtree(host, ignore_errors=True)
    summary = summarize(legs, lakes)
    print(json.dumps(summary, indent=1))
    if args.out is not None:
        doc = {
            "what": "Dataset open cold/warm and loader worker USS/PSS, small vs big lake "
            "(benchmarks/scale/read_side.py)",
            "caches": {
                k: getattr(args, k)
                for k in ("footer_cache_bytes", "steps_cache_bytes", "chunk_cache", "episode_cache")
            },
            "note": args.note,
            "lakes": lakes,
            "workers": args.workers,
            "batches": args.batches,
            "batch_size": args.batch_size,
            "repeats": args.repeats,
            "elapsed_s": round(time.monotonic() - started, 1),
            "summary": summary,
            "legs": legs,
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
