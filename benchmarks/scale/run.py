"""Scale benchmark: the lake's costs against its size (issue 11), and the loader on data far
larger than its caches, side by side with LeRobotDataset and the decode limit.

    python -m benchmarks.scale.run                       # 1k, 10k, 100k episodes; 500 real episodes
    python -m benchmarks.scale.run --quick               # 200 and 1k; 50 real episodes (minutes)
    python -m benchmarks.scale.run --smoke               # tiny, for the test (no LeRobot leg)
    python -m benchmarks.scale.run --sizes 1000,10000 --out DIR --ingest-json ingest.json

Two lakes. The metadata lake grows through `LakeWriter.commit_episodes` (group commits) with
one short episode's rows copied under new ids (`_grow`), each group also recorded in a chdb
catalog by `Catalog.record_episodes` as the stream sink does; at each size it measures commit
latency per episode (the last group commits before that size), Delta log and checkpoint bytes,
catalog query latency, and in a fresh process (`_probe`) Dataset open time, peak RSS of the main
process and of each of 2 loader workers with fixed cache settings, and bytes read per sample.
The real lake holds genuinely distinct rendered episodes (`_real`); on it the loader
benchmark's legs (pi_loader, the raw decode limit, LeRobotDataset v3 in the peers' venv) run in
one run, and the probe measures bytes read per sample against the encoded size of the video
rows holding the returned frames. Prints a table, writes OUT/scale.json and OUT/scale.png with
a `targets` object (booleans; `targets_detail` says by how much and why where one is missed).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks._figures import MIN_REPEATS, legacy
from benchmarks.faults.run import describe, machine
from benchmarks.loader._data import DataConfig
from benchmarks.loader._runner import run_leg
from benchmarks.scale import _grow, _probe, _real
from benchmarks.scale._report import judge, plot, print_table

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
MODES: dict[str, dict[str, Any]] = {
    # sizes, group size, real episodes x seconds, frame size, leg seconds, probe batches
    "full": dict(sizes="1000,10000,100000", group=50, real=500, dur=4.0, px=224, measure=10.0, batches=40),
    "quick": dict(sizes="200,1000", group=10, real=50, dur=4.0, px=224, measure=4.0, batches=20),
    "smoke": dict(sizes="20,40", group=5, real=4, dur=4.0, px=64, measure=1.0, batches=3),
}


def ingest_figure(path: Path | None) -> dict[str, Any]:
    """Parallelism 2 vs 1 ingest throughput from an ingest JSON (measured separately).

    Reads what `benchmarks/ingest/run.py --parallelism 1,2` writes (`speedup_p2_over_p1`, else
    its `runs[].parallelism` and `runs[].burst.episodes_per_s`), or {"episodes_per_s": {"1": a,
    "2": b}}.
    """
    if path is None:
        return {
            "parallelism_2_vs_1": None,
            "source": None,
            "why": "not measured by this benchmark: pass --ingest-json PATH (benchmarks/ingest/run.py "
            "--parallelism 1,2 writes it: the stream job's ingest throughput at parallelism 1 and 2)",
        }
    data = json.loads(path.read_text())
    rates: dict[str, Any] = dict(data.get("episodes_per_s") or {})
    cpu_busy: dict[str, float] = {}
    freshness_p95: dict[str, float] = {}
    for run in data.get("runs") or []:  # the last run of each parallelism, for the reasons
        burst = run.get("burst") or {}
        if "parallelism" in run and burst.get("machine_cpu_busy") is not None:
            cpu_busy[str(run["parallelism"])] = float(burst["machine_cpu_busy"])
        if "parallelism" in run and run.get("freshness_p95_s") is not None:
            freshness_p95[str(run["parallelism"])] = float(run["freshness_p95_s"])
    speedup = data.get("speedup_p2_over_p1")
    if (
        speedup is None
        and isinstance(rates.get("1"), int | float)
        and isinstance(rates.get("2"), int | float)
    ):
        # two single figures: kept, but not a figure a target can be judged on (benchmarks._figures)
        speedup = legacy(round(float(rates["2"]) / float(rates["1"]), 2), "one burst per parallelism")
    elif isinstance(speedup, int | float):
        speedup = legacy(float(speedup), "one burst per parallelism")
    why = None if speedup is not None else f"{path} holds no episodes/s at parallelism 1 and 2"
    return {
        "parallelism_2_vs_1": speedup,
        "source": str(path),
        "episodes_per_s": rates or None,
        # the whole machine's CPU during each burst: how much room a second subtask had
        "machine_cpu_busy": cpu_busy or None,
        "freshness_p95_s": freshness_p95 or None,
        "why": why,
    }


def probe(
    lake: Path, catalog: Path | None, args: argparse.Namespace, horizon: int, env: dict[str, str]
) -> dict[str, Any]:
    """The probe twice on a fresh host index directory (TMPDIR: the loader keeps a local lake's
    per-host steps and chunk indexes under it), each in a fresh process with cold per-process
    caches and the same sample order: "cold host" (the indexes are built during the probe) and
    then "warm host" (they exist, as on any host after its first pass over those files: an index
    is built once per host per file and persists, like the disk cache). The warm figures are the
    result; the cold ones are under "cold_host"."""
    cmd = [sys.executable, "-m", "benchmarks.scale._probe", "--lake", str(lake), "--workers", "2"]
    cmd += [
        "--batches",
        str(args.probe_batches),
        "--batch-size",
        str(args.batch_size),
        "--horizon",
        str(horizon),
    ]
    host = Path(tempfile.mkdtemp(prefix="scale-host-index-"))
    host_env = {**env, "TMPDIR": str(host)}
    try:
        cold = run_leg(cmd, timeout_s=1800, env=host_env)
        result = run_leg(
            cmd + (["--catalog", str(catalog)] if catalog is not None else []), timeout_s=1800, env=host_env
        )
    finally:
        shutil.rmtree(host, ignore_errors=True)
    for label, r in (("cold host", cold), ("warm host", result)):
        if "error" in r:
            print(f"  probe ({label}) FAILED: {r['error'][-1500:]}", flush=True)
        else:
            workers = ", ".join(f"{w['hwm_mb']:.0f}" for w in r["workers"])
            print(
                f"  probe ({label}): open {r['open_s']:.2f} s ({r['samples']:,} samples), main peak "
                f"{r['main']['hwm_mb']:.0f} MB, workers {workers} MB, bytes read/sample "
                f"{r['bytes_read_per_sample']}, footers {r['loader_stats'].get('footer_reads')}",
                flush=True,
            )
    result["host"] = "warm"
    result["cold_host"] = {
        key: cold.get(key)
        for key in (
            "open_s",
            "open_again_s",
            "bytes_read",
            "bytes_read_per_sample",
            "loader_stats",
            "workers",
            "main",
            "error",
        )
        if key in cold
    }
    return result


def grow_and_measure(args: argparse.Namespace, sizes: list[int], env: dict[str, str]) -> list[dict[str, Any]]:
    config = _grow.GrowConfig(sizes=tuple(sizes), group_size=args.group_size, timed_groups=args.timed_groups)
    root = args.data / "meta"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    out = []
    print(
        f"metadata lake: {config.steps_per_episode} steps x {config.size_px}px video per episode, "
        f"group commits of {config.group_size} -> {root}",
        flush=True,
    )
    for size, figures in _grow.grow(root / "lake", root / "catalog", config):
        q = figures["catalog_queries"]
        c = figures["commit"]
        print(
            f"  at {size:,}: commit {c['per_episode_ms']['p50']:.1f} ms/episode p50 "
            f"({c['per_episode_ms']['p99']:.1f} p99), catalog record {c['catalog_record_ms']['p50']:.0f} ms; "
            f"selection {q['selection']['p50']:.0f} ms, group-by {q['group_by']['p50']:.0f} ms",
            flush=True,
        )
        t = time.monotonic()
        figures["probe"] = p = probe(root / "lake", root / "catalog", args, horizon=10, env=env)
        figures["probe_s"] = round(time.monotonic() - t, 1)
        # every episode is the same copy: a few give the exact encoded size per sample
        encoded = _probe.encoded_sizes(root / "lake", max_episodes=5, contiguous=True)
        read = p.get("bytes_read_per_sample")
        cold = (p.get("cold_host") or {}).get("bytes_read_per_sample")
        chunk = encoded["chunk_bytes_per_sample"]
        figures["bytes_per_sample"] = {
            "read": read,
            "read_cold_host": cold,
            "encoded_chunk_bytes": chunk,
            "read_vs_encoded_chunks": None if read is None else round(read / chunk, 2),
            "read_vs_encoded_chunks_cold_host": None if cold is None else round(cold / chunk, 2),
        }
        out.append(figures)
    return out


def throughput(args: argparse.Namespace, env: dict[str, str]) -> dict[str, Any]:
    config = DataConfig(episodes=args.real_episodes, duration_s=args.real_duration_s, size_px=args.real_px)
    root = args.data / f"real-{config.key}"
    loaders = [name for name in args.loaders.split(",") if name]
    print(
        f"real lake: {config.episodes} distinct episodes x {config.duration_s:g} s at {config.rate_hz:g} Hz, "
        f"3 cameras {config.size_px}px -> {root}",
        flush=True,
    )
    peers = args.peers_venv if "lerobot" in loaders else None
    lake, python, lerobot, timings = _real.prepare(
        config, root, jobs=args.render_jobs, group_size=args.group_size, peers=peers
    )
    workers = [int(w) for w in args.workers.split(",")]
    legs = _real.run_legs(
        loaders,
        workers,
        lake=lake,
        python=python,
        lerobot=lerobot,
        horizon=args.horizon,
        batch_size=args.batch_size,
        measure_s=args.measure_s,
        repeats=args.repeats,
        env=env,
    )
    rates = _real.spreads(legs)
    cpu = _real.spreads(legs, "cpu_ms_per_sample")
    p = probe(lake, None, args, horizon=args.horizon, env=env)
    encoded = _probe.encoded_sizes(lake, max_episodes=config.episodes)
    read = p.get("bytes_read_per_sample")
    chunk, frame = encoded["chunk_bytes_per_sample"], encoded["frame_bytes_per_sample"]
    samples = config.episodes * int(config.duration_s * config.rate_hz)
    return {
        "data": {
            "episodes": config.episodes,
            "episode_duration_s": config.duration_s,
            "rate_hz": config.rate_hz,
            "samples": samples,
            "frame_px": config.size_px,
            "cameras": 3,
            "video_chunk_frames": config.chunk_frames,
            "keyframe_interval": config.keyframe_interval,
            "distinct_episodes": True,
        },
        "caches": {
            "pi_loader_episode_cache_per_worker": 32,
            "pi_loader_chunk_cache_per_worker": _default("chunk_cache_size"),
            "episodes_per_cache": round(config.episodes / 32, 1),
        },
        "prepare_s": timings,
        "loaders": loaders,
        "legs": legs,
        "rates": rates,
        "cpu_ms_per_sample": cpu,
        "ratios": _real.ratios(legs),
        "why": None if "lerobot" in loaders else f"LeRobot leg not run (loaders: {loaders})",
        "probe": p,
        "bytes_per_sample": {
            "read": read,
            "encoded_chunk_bytes": chunk,
            "encoded_frame_bytes": frame,
            "read_vs_encoded_chunks": None if read is None else round(read / chunk, 2),
            "read_vs_encoded_frames": None if read is None else round(read / frame, 2),
            "read_cold_host": (p.get("cold_host") or {}).get("bytes_read_per_sample"),
            "read_vs_encoded_chunks_cold_host": None
            if (p.get("cold_host") or {}).get("bytes_read_per_sample") is None
            else round(p["cold_host"]["bytes_read_per_sample"] / chunk, 2),
            "encoded": encoded,
            "why": p.get("bytes_read_why") or p.get("error"),
        },
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="sizes 200,1000; 50 real episodes; 4 s legs")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, 4 small real episodes, no LeRobot")
    parser.add_argument("--sizes", default=None, help="comma-separated lake sizes in episodes")
    parser.add_argument("--group-size", type=int, default=None, help="episodes per group commit")
    parser.add_argument(
        "--timed-groups",
        type=int,
        default=None,
        help="group commits timed before each size (default: the tables' checkpoint interval, 100)",
    )
    parser.add_argument("--real-episodes", type=int, default=None, help="distinct rendered episodes")
    parser.add_argument("--real-duration-s", type=float, default=None)
    parser.add_argument("--real-px", type=int, default=None, help="frame size of the real episodes")
    parser.add_argument("--render-jobs", type=int, default=2)
    parser.add_argument("--loaders", default=None, help="throughput legs (default raw,pi_loader,lerobot)")
    parser.add_argument("--workers", default="2", help="worker counts of the throughput legs")
    parser.add_argument(
        "--repeats",
        type=int,
        default=MIN_REPEATS,
        help=f"runs of every leg, interleaved; figures are the median and spread (>= {MIN_REPEATS})",
    )
    parser.add_argument("--measure-s", type=float, default=None)
    parser.add_argument("--probe-batches", type=int, default=None)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--horizon", type=int, default=50)
    parser.add_argument("--skip-throughput", action="store_true", help="only the lake sizes")
    parser.add_argument(
        "--prepare-only", action="store_true", help="build the real episodes' data (render, LeRobot) and stop"
    )
    parser.add_argument("--ingest-json", type=Path, default=None)
    parser.add_argument(
        "--throughput-from",
        type=Path,
        default=None,
        help="measure no throughput legs: take them from this earlier scale.json (marked taken_from)",
    )
    parser.add_argument(
        "--add-ingest",
        type=Path,
        default=None,
        metavar="SCALE_JSON",
        help="measure nothing: put --ingest-json's figures into this earlier scale.json (the ingest "
        "benchmark runs on a quiet machine, apart), judge the targets again, rewrite it and its PNG",
    )
    parser.add_argument(
        "--sizes-from",
        type=Path,
        default=None,
        help="grow no lakes: take the sizes' figures from this earlier scale.json (marked taken_from)",
    )
    parser.add_argument("--peers-venv", type=Path, default=ROOT / "benchmarks" / "loader" / ".venv-peers")
    parser.add_argument("--data", type=Path, default=HERE / "results" / "data", help="built data (cached)")
    parser.add_argument("--out", type=Path, default=HERE / "results")
    args = parser.parse_args()
    mode = "smoke" if args.smoke else "quick" if args.quick else "full"
    d = MODES[mode]
    sizes = sorted({int(s) for s in (args.sizes or d["sizes"]).split(",") if s})
    args.group_size = args.group_size or d["group"]
    args.real_episodes = args.real_episodes or d["real"]
    args.real_duration_s = args.real_duration_s or d["dur"]
    args.real_px = args.real_px or d["px"]
    args.measure_s = args.measure_s or d["measure"]
    if args.repeats < MIN_REPEATS:
        parser.error(f"--repeats must be >= {MIN_REPEATS} (a median with its spread), got {args.repeats}")
    args.probe_batches = args.probe_batches or d["batches"]
    args.loaders = args.loaders or ("raw,pi_loader" if mode == "smoke" else "raw,pi_loader,lerobot")
    unknown = set(args.loaders.split(",")) - set(_real.LEG_LABELS)
    if unknown:
        parser.error(f"unknown loaders {sorted(unknown)}; choose from {list(_real.LEG_LABELS)}")
    if args.real_duration_s * 15.0 < args.horizon:
        parser.error(
            f"--real-duration-s {args.real_duration_s} gives fewer steps than --horizon {args.horizon}"
        )
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    if args.prepare_only:
        config = DataConfig(
            episodes=args.real_episodes, duration_s=args.real_duration_s, size_px=args.real_px
        )
        peers = args.peers_venv if "lerobot" in args.loaders else None
        root = args.data / f"real-{config.key}"
        *_, timings = _real.prepare(
            config, root, jobs=args.render_jobs, group_size=args.group_size, peers=peers
        )
        print(f"real episodes' data ready under {root}: {timings}")
        return 0
    if args.add_ingest is not None:
        return add_ingest(args.add_ingest, args.ingest_json)
    host = machine()
    print(f"machine: {describe(host)}", flush=True)
    t0 = time.monotonic()
    results: dict[str, Any] = {"benchmark": "scale", "mode": mode, "machine": host, "sizes": []}
    if args.sizes_from is not None:
        # The lake sizes of an earlier run, labelled so (when only the throughput legs changed).
        earlier_sizes = json.loads(args.sizes_from.read_text())
        results["sizes"] = earlier_sizes["sizes"]
        results["sizes_taken_from"] = {
            "path": str(args.sizes_from),
            "machine": earlier_sizes.get("machine"),
            "elapsed": earlier_sizes.get("elapsed"),
        }
        sizes = [int(s["episodes"]) for s in results["sizes"]]
    else:
        results["sizes"] = grow_and_measure(args, sizes, env)
    elapsed = {"sizes_s": round(time.monotonic() - t0, 1)}
    t = time.monotonic()
    if args.throughput_from is not None:
        # The throughput legs of an earlier run, labelled so (when only the lake's sizes changed).
        earlier = json.loads(args.throughput_from.read_text())
        results["throughput"] = earlier.get("throughput")
        if results["throughput"] is not None:
            results["throughput"]["taken_from"] = {
                "path": str(args.throughput_from),
                "machine": earlier.get("machine"),
                "elapsed": earlier.get("elapsed"),
            }
    else:
        results["throughput"] = None if args.skip_throughput else throughput(args, env)
    elapsed["throughput_s"] = round(time.monotonic() - t, 1)
    results["ingest"] = ingest_figure(args.ingest_json)
    results["config"] = {
        "grow": _grow.config_dict(
            _grow.GrowConfig(sizes=tuple(sizes), group_size=args.group_size, timed_groups=args.timed_groups)
        ),
        "probe": {
            "workers": 2,
            "batches": args.probe_batches,
            "batch_size": args.batch_size,
            "chunk_cache_size": 64,
            "episode_cache_size": 32,
            "horizon_metadata_lake": 10,
        },
        "throughput": {
            "workers": args.workers,
            "measure_s": args.measure_s,
            "repeats": args.repeats,
            "horizon": args.horizon,
            "batch_size": args.batch_size,
        },
        "argv": sys.argv[1:],
    }
    detail = judge(results)
    results["targets"] = {name: d["met"] for name, d in detail.items()}
    results["targets_detail"] = detail
    elapsed["total_s"] = round(time.monotonic() - t0, 1)
    results["elapsed"] = elapsed
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "scale.json").write_text(json.dumps(results, indent=2))
    plot(results, args.out / "scale.png")
    print_table(results)
    print(f"wrote {args.out / 'scale.json'} and {args.out / 'scale.png'} ({elapsed['total_s']:.0f} s in all)")
    return 0


def _default(name: str) -> Any:
    """A `pi_loader.Dataset` argument's default (what the pi_loader leg runs with)."""
    import inspect

    import pi_loader

    return inspect.signature(pi_loader.Dataset).parameters[name].default


def add_ingest(scale_json: Path, ingest_json: Path | None) -> int:
    """Put the ingest figures into an earlier scale run's JSON and judge its targets again."""
    if ingest_json is None:
        raise SystemExit("--add-ingest needs --ingest-json PATH (benchmarks/ingest/run.py --parallelism 1,2)")
    results = json.loads(scale_json.read_text())
    results["ingest"] = ingest_figure(ingest_json)
    results["ingest"]["added_after_the_run"] = True  # measured apart, on its own
    detail = judge(results)
    results["targets"] = {name: d["met"] for name, d in detail.items()}
    results["targets_detail"] = detail
    scale_json.write_text(json.dumps(results, indent=2))
    plot(results, scale_json.with_suffix(".png"))
    print_table(results)
    print(f"rewrote {scale_json} and {scale_json.with_suffix('.png')} with {ingest_json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
