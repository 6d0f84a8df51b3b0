"""Loader benchmark: pi_loader vs LeRobotDataset v3 vs Mosaic streaming vs the raw decode limit.

A sample is 3 camera frames at 224x224 (uint8 HWC), the proprio state and a 50-step action
chunk, in shuffled order, batched by 32. Every loader reads the same episodes: a pi-lake lake
made by the simulator -> featurize -> LakeWriter path; its decoded frames, state and actions are
exported once (.npz), from which lerobot writes its own v3 dataset (its own video encoding) and
Mosaic its MDS shards (JPEG frames). Each (loader, workers) leg runs in its own process (the
peers in their own venv, made by setup_peers.sh); the parent samples the proportional set size
(PSS) of the leg's process tree for its peak memory. Time to first batch is also taken on a
1,000-episode lake selected with SQL through the catalog, in a fresh process.

    python -m benchmarks.loader.run            # ~24 episodes, 1 and 2 workers
    python -m benchmarks.loader.run --quick    # fewer episodes, shorter legs

Prints a table, writes results/loader.json and results/loader.png.

This module parses the arguments and runs the legs; `_data` builds the data, `_legs` are the
legs' processes, `_runner` runs one of them and samples its memory, `_report` summarises the
results, prints the table and draws the plot.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks._figures import MIN_REPEATS, interleaved
from benchmarks.loader._data import DataConfig, build_big_lake, build_lake, export_episodes
from benchmarks.loader._report import LABELS, LOADERS, plot, print_table, summarize, tree_bytes
from benchmarks.loader._runner import run_leg

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
# pi_loader's default decoded-chunk cache per worker (loader/pi_loader/_dataset.py)
PI_LOADER_CHUNK_CACHE = 64


WARMUP_BATCHES = 20


def ensure_peers(venv: Path) -> Path:
    python = venv / "bin" / "python"
    if not python.exists():
        print(f"peers' venv missing at {venv}: running setup_peers.sh", flush=True)
        subprocess.run(
            ["bash", str(HERE / "setup_peers.sh")], check=True, env=dict(os.environ, PEERS_VENV=str(venv))
        )
    return python


def build_peer(
    python: Path, script: str, export: Path, out: Path, config: DataConfig, extra: list[str]
) -> None:
    marker = out.with_name(out.name + ".done.json")
    if marker.exists() and json.loads(marker.read_text()) == config.key:
        return
    start = time.monotonic()
    log = out.with_name(out.name + ".build.log")
    command = [str(python), str(HERE / "peers" / script), "build", "--export", str(export), "--out", str(out)]
    # The peers' encoders are chatty (SVT-AV1 prints its config per video): keep it in a log,
    # show only the progress lines.
    with open(log, "w") as sink:
        proc = subprocess.Popen(
            [*command, *extra], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT
        )
        assert proc.stdout is not None
        for line in proc.stdout:
            sink.write(line)
            if line.startswith("  "):
                print(line, end="", flush=True)
    if proc.wait() != 0:
        raise RuntimeError(f"{script} build failed (exit {proc.returncode}); see {log}")
    print(f"  {script}: built in {time.monotonic() - start:.0f} s (log: {log})", flush=True)
    marker.write_text(json.dumps(config.key))


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="8 episodes of 6 s, 4 s legs")
    parser.add_argument("--episodes", type=int, default=None)
    parser.add_argument("--duration-s", type=float, default=None)
    parser.add_argument("--measure-s", type=float, default=None, help="counted seconds per leg (max)")
    parser.add_argument("--workers", default="1,2", help="comma-separated worker counts")
    parser.add_argument("--loaders", default=",".join(LOADERS))
    parser.add_argument(
        "--repeats",
        type=int,
        default=MIN_REPEATS,
        help=f"runs of every leg, interleaved; figures are the median and spread (>= {MIN_REPEATS})",
    )
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--horizon", type=int, default=50)
    parser.add_argument(
        "--big-episodes", type=int, default=1000, help="episodes of the time-to-first-batch lake"
    )
    parser.add_argument(
        "--keyframe-interval",
        type=int,
        default=1,
        help="the lake's IDR interval in frames (1: intra-only, the default; 10: a GOP per video row)",
    )
    parser.add_argument("--peers-venv", type=Path, default=HERE / ".venv-peers")
    parser.add_argument("--out", type=Path, default=HERE / "results")
    args = parser.parse_args()
    if args.repeats < MIN_REPEATS:
        parser.error(f"--repeats must be >= {MIN_REPEATS} (a median with its spread), got {args.repeats}")

    episodes = args.episodes or (8 if args.quick else 24)
    duration_s = args.duration_s or (6.0 if args.quick else 8.0)
    measure_s = args.measure_s or (4.0 if args.quick else 8.0)
    workers = [int(w) for w in args.workers.split(",")]
    loaders = [name for name in args.loaders.split(",") if name]
    unknown = sorted(set(loaders) - set(LOADERS))
    if unknown:
        parser.error(f"unknown loaders {unknown}; choose from {list(LOADERS)}")
    config = DataConfig(episodes=episodes, duration_s=duration_s, keyframe_interval=args.keyframe_interval)
    data = args.out / "data" / config.key
    data.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))

    t0 = time.monotonic()
    print(
        f"data: {episodes} episodes x {duration_s:g} s at {config.rate_hz:g} Hz, 3 cameras, "
        f"{config.size_px}x{config.size_px} -> {data}",
        flush=True,
    )
    lake = build_lake(config, data)
    export = export_episodes(config, lake, data)
    big_lake, big_catalog = build_big_lake(config, data, args.big_episodes)
    peer_roots = {"lerobot": data / "lerobot", "mosaic": data / "mosaic"}
    python = None
    if {"lerobot", "mosaic"} & set(loaders):
        python = ensure_peers(args.peers_venv)
        if "lerobot" in loaders:
            build_peer(python, "lerobot_leg.py", export, peer_roots["lerobot"], config, [])
        if "mosaic" in loaders:
            build_peer(
                python,
                "mosaic_leg.py",
                export,
                peer_roots["mosaic"],
                config,
                ["--horizon", str(args.horizon)],
            )
    print(f"data ready in {time.monotonic() - t0:.0f} s", flush=True)

    # 20 batches of warm-up: pi_loader's in-flight depth grows while the consumer waits (4 -> 8
    # at 2 workers) and must be done growing before the CPU window opens (_timing.measure)
    warmup = ["--warmup-batches", str(WARMUP_BATCHES)]
    common = ["--batch-size", str(args.batch_size), *warmup, "--measure-s", str(measure_s)]
    legs: list[dict[str, Any]] = []
    # Repeats go round the whole set of legs, interleaved with the order rotated each repeat, so
    # a burst of load on this shared machine hits every loader alike; figures are the median and
    # spread over the repeats, ratios taken repeat by repeat (benchmarks._figures).
    runs = [
        (r, w, name) for r, (w, name) in interleaved([(w, n) for w in workers for n in loaders], args.repeats)
    ]
    for repeat, w, name in runs:
        if name.startswith(("raw", "pi_loader")):
            leg = "raw" if name.startswith("raw") else "pi_loader"
            cmd = [sys.executable, "-m", "benchmarks.loader._legs", leg, "--lake", str(lake)]
            cmd += ["--horizon", str(args.horizon)]
            if name == "raw_cached":
                cmd += ["--chunk-cache", str(PI_LOADER_CHUNK_CACHE)]
            if name in ("raw", "raw_cached"):  # the limit converts with swscale, as pi_loader does
                cmd += ["--rgb24"]
            if name == "pi_loader_torch":
                cmd += ["--api", "torch"]
            if name == "pi_loader_torch_batches":
                cmd += ["--api", "torch_batches"]
            if name == "pi_loader_lean":
                cmd += ["--lean"]
            if name == "pi_loader_trim_off":  # the Loader with its workers' heap trim off
                cmd += ["--heap-trim", "off"]
            if name == "pi_loader_block":
                # one block per video row: neighbouring samples share a row's read and decodes;
                # not the uniform shuffle the targets are about, so it is shown, not judged
                cmd += ["--block-size", str(config.chunk_frames)]
        else:
            assert python is not None
            cmd = [
                str(python),
                str(HERE / "peers" / f"{name}_leg.py"),
                "run",
                "--root",
                str(peer_roots[name]),
            ]
            if name == "lerobot":
                cmd += ["--horizon", str(args.horizon)]
        result = run_leg([*cmd, "--workers", str(w), *common], timeout_s=measure_s + 240, env=env)
        result.update(loader=name, workers=w, repeat=repeat)
        legs.append(result)
        if "error" in result:
            print(f"{LABELS[name]:>30} x{w}: FAILED {result['error']}", flush=True)
        else:
            print(
                f"{LABELS[name]:>30} x{w}: {result['samples_per_s']:8.1f} samples/s, first batch "
                f"{result['first_batch_from_spawn_s']:.2f} s, peak {result['peak_memory_mb']:.0f} MB",
                flush=True,
            )

    # A fresh process each repeat (the cold start is a process start; the OS page cache stays
    # warm, as on a host that trained on this lake before): the figure is their median and spread.
    ttfb_runs = []
    for _ in range(args.repeats):
        one = run_leg(
            [
                sys.executable,
                "-m",
                "benchmarks.loader._legs",
                "ttfb",
                "--lake",
                str(big_lake),
                "--catalog",
                str(big_catalog),
                "--workers",
                "2",
                "--horizon",
                str(args.horizon),
                "--batch-size",
                str(args.batch_size),
                "--warmup-batches",
                "1",
                "--measure-s",
                "0",
            ],
            timeout_s=300,
            env=env,
        )
        ttfb_runs.append(one)
    ttfb = dict(ttfb_runs[0])
    ttfb["runs"] = [r.get("first_batch_from_spawn_s") for r in ttfb_runs]
    ttfb.update(episodes=args.big_episodes, workers=2, sql="SELECT episode_id FROM episodes")
    storage = {"pi-lake": lake, **peer_roots}
    storage_mb = {name: round(tree_bytes(path) / 2**20, 1) for name, path in storage.items() if path.exists()}
    results = summarize(legs, ttfb, config=config, args=args, measure_s=measure_s)
    results["storage_mb"] = storage_mb
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "loader.json").write_text(json.dumps(results, indent=2))
    plot(results, args.out / "loader.png")
    print_table(results)
    print(
        f"wrote {args.out / 'loader.json'} and {args.out / 'loader.png'} "
        f"({time.monotonic() - t0:.0f} s in all)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
