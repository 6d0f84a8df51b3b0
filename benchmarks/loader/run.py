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
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.loader._data import DataConfig, build_big_lake, build_lake, export_episodes
from benchmarks.loader._timing import RESULT_PREFIX

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
LOADERS = (
    "raw",
    "raw_cached",
    "raw_numpy",
    "pi_loader",
    "pi_loader_lean",
    "pi_loader_block",
    "pi_loader_torch",
    "lerobot",
    "mosaic",
)
LABELS = {
    "raw": "raw decode limit",
    "raw_cached": "decode only, pi_loader's way",
    "raw_numpy": "decode only, numpy yuv->rgb",
    "pi_loader": "pi_loader",
    "pi_loader_lean": "pi_loader, lean memory settings",
    "pi_loader_block": "pi_loader, block shuffle of 10",
    "pi_loader_torch": "pi_loader in torch DataLoader",
    "lerobot": "LeRobotDataset v3",
    "mosaic": "Mosaic streaming",
}
# pi_loader's default decoded-chunk cache per worker (loader/pi_loader/_dataset.py)
PI_LOADER_CHUNK_CACHE = 64
TARGET_VS_LEROBOT = 5.0
TARGET_VS_LIMIT = 0.70
TARGET_TTFB_S = 5.0


class PeakMemory:
    """Samples the summed PSS (RSS where PSS is unreadable) of a process and its descendants."""

    def __init__(self, pid: int, interval_s: float = 0.1) -> None:
        import psutil  # type: ignore[import-untyped]

        self._root = psutil.Process(pid)
        self._interval_s = interval_s
        self.peak_bytes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _sample(self) -> int:
        import psutil

        total = 0
        try:
            procs = [self._root, *self._root.children(recursive=True)]
        except psutil.Error:
            return 0
        for p in procs:
            try:
                try:
                    total += int(p.memory_full_info().pss)
                except (psutil.AccessDenied, AttributeError):
                    total += int(p.memory_info().rss)
            except psutil.Error:
                pass
        return total

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak_bytes = max(self.peak_bytes, self._sample())
            self._stop.wait(self._interval_s)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak_bytes


def run_leg(command: list[str], *, timeout_s: float, env: dict[str, str]) -> dict[str, Any]:
    """Run one leg's process; returns its result with peak_memory_mb, or an error entry."""
    spawned = time.monotonic()
    proc = subprocess.Popen(
        [*command, "--spawned-at", repr(spawned)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=ROOT,
    )
    memory = PeakMemory(proc.pid)
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        out += f"\n(killed after {timeout_s:.0f} s)"
    peak = memory.stop()
    for line in out.splitlines():
        if line.startswith(RESULT_PREFIX):
            result: dict[str, Any] = json.loads(line[len(RESULT_PREFIX) :])
            result["peak_memory_mb"] = round(peak / 2**20, 1)
            return result
    return {"error": f"exit {proc.returncode}: " + "\n".join(out.splitlines()[-15:])}


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
    parser.add_argument("--repeats", type=int, default=1, help="runs of every leg; the best one counts")
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

    common = ["--batch-size", str(args.batch_size), "--warmup-batches", "3", "--measure-s", str(measure_s)]
    legs: list[dict[str, Any]] = []
    # Repeats go round the whole set of legs, so a burst of load on this shared machine hits
    # every loader alike; each (loader, workers) keeps its best run.
    runs = [(r, w, name) for r in range(args.repeats) for w in workers for name in loaders]
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
            if name == "pi_loader_lean":
                cmd += ["--lean"]
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

    ttfb = run_leg(
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
    ttfb.update(episodes=args.big_episodes, workers=2, sql="SELECT episode_id FROM episodes")
    storage = {"pi-lake": lake, **peer_roots}
    storage_mb = {
        name: round(_tree_bytes(path) / 2**20, 1) for name, path in storage.items() if path.exists()
    }
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


def _tree_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def best_legs(legs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One leg per (loader, workers): its fastest successful run, else its last failure."""
    best: dict[tuple[str, int], dict[str, Any]] = {}
    for leg in legs:
        key = (leg["loader"], leg["workers"])
        old = best.get(key)
        better = old is None or (
            "error" not in leg and ("error" in old or leg["samples_per_s"] > old["samples_per_s"])
        )
        if better:
            best[key] = leg
    return sorted(best.values(), key=lambda leg: (leg["workers"], LOADERS.index(leg["loader"])))


def _rate(legs: list[dict[str, Any]], loader: str, workers: int) -> float | None:
    rates = [
        float(leg["samples_per_s"])
        for leg in legs
        if leg["loader"] == loader and leg["workers"] == workers and "error" not in leg
    ]
    return max(rates) if rates else None


def _cpu(legs: list[dict[str, Any]], loader: str, workers: int) -> float | None:
    values = [
        float(leg["cpu_ms_per_sample"])
        for leg in legs
        if leg["loader"] == loader
        and leg["workers"] == workers
        and "error" not in leg
        and leg.get("cpu_ms_per_sample")
    ]
    return min(values) if values else None


def summarize(
    legs: list[dict[str, Any]],
    ttfb: dict[str, Any],
    *,
    config: DataConfig,
    args: argparse.Namespace,
    measure_s: float,
) -> dict[str, Any]:
    ratios: dict[str, Any] = {}
    for w in sorted({leg["workers"] for leg in legs}):
        pi, lerobot, limit = _rate(legs, "pi_loader", w), _rate(legs, "lerobot", w), _rate(legs, "raw", w)
        cpu_pi, cpu_lerobot, cpu_limit = (_cpu(legs, name, w) for name in ("pi_loader", "lerobot", "raw"))
        ratios[str(w)] = {
            "pi_loader_vs_lerobot": None if not (pi and lerobot) else round(pi / lerobot, 2),
            "pi_loader_vs_limit": None if not (pi and limit) else round(pi / limit, 3),
            # the same comparisons in CPU per sample (less moved by other load on the machine)
            "pi_loader_vs_lerobot_cpu": None
            if not (cpu_pi and cpu_lerobot)
            else round(cpu_lerobot / cpu_pi, 2),
            "pi_loader_vs_limit_cpu": None if not (cpu_pi and cpu_limit) else round(cpu_limit / cpu_pi, 3),
        }
    two = ratios.get("2", {})
    ttfb_s = ttfb.get("first_batch_from_spawn_s")
    vs_lerobot = [r["pi_loader_vs_lerobot"] for r in ratios.values() if r["pi_loader_vs_lerobot"] is not None]
    targets = {
        "pi_loader >= 5x LeRobotDataset (every worker count)": (
            None if not vs_lerobot else all(v >= TARGET_VS_LEROBOT for v in vs_lerobot)
        ),
        ">= 70% of the raw decode limit with 2 workers": (
            None if two.get("pi_loader_vs_limit") is None else two["pi_loader_vs_limit"] >= TARGET_VS_LIMIT
        ),
        f"time to first batch < 5 s on {args.big_episodes} episodes": (
            None if ttfb_s is None else ttfb_s < TARGET_TTFB_S
        ),
    }
    return {
        "sample": {
            "cameras": 3,
            "frame": f"{config.size_px}x{config.size_px}x3 uint8",
            "action_horizon": args.horizon,
            "batch_size": args.batch_size,
            "order": "shuffled",
        },
        "data": {
            "episodes": config.episodes,
            "episode_duration_s": config.duration_s,
            "rate_hz": config.rate_hz,
            "samples": config.episodes * int(config.duration_s * config.rate_hz),
            "video_chunk_frames": config.chunk_frames,
            "video_keyframe_interval": config.keyframe_interval,
        },
        "measure_s": measure_s,
        "machine": {"cpus": os.cpu_count()},
        "legs": legs,
        "ratios": ratios,
        "time_to_first_batch": ttfb,
        "targets": targets,
    }


def print_table(results: dict[str, Any]) -> None:
    print(
        "\n| loader | workers | samples/s | CPU ms/sample | first batch (s, from process start) "
        "| peak memory (MB) |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for leg in best_legs(results["legs"]):
        name = LABELS[leg["loader"]]
        if "error" in leg:
            print(f"| {name} | {leg['workers']} | failed | | | |")
            continue
        cpu = "" if leg.get("cpu_ms_per_sample") is None else f"{leg['cpu_ms_per_sample']:.2f}"
        print(
            f"| {name} | {leg['workers']} | {leg['samples_per_s']:.1f} | {cpu} | "
            f"{leg['first_batch_from_spawn_s']:.2f} | {leg['peak_memory_mb']:.0f} |"
        )
    for w, r in results["ratios"].items():
        print(
            f"{w} worker(s): pi_loader / LeRobot = {r['pi_loader_vs_lerobot']} "
            f"(CPU per sample: {r['pi_loader_vs_lerobot_cpu']}), pi_loader / limit = "
            f"{r['pi_loader_vs_limit']} (CPU per sample: {r['pi_loader_vs_limit_cpu']})"
        )
    t = results["time_to_first_batch"]
    if "error" in t:
        print(f"time to first batch ({t['episodes']} episodes): failed: {t['error']}")
    else:
        print(
            f"time to first batch, {t['episodes']} episodes via SQL, 2 workers: "
            f"{t['first_batch_from_spawn_s']:.2f} s from process start (open {t['open_s']:.2f} s), "
            f"peak {t['peak_memory_mb']:.0f} MB"
        )
    if results.get("storage_mb"):
        sizes = ", ".join(f"{name} {mb:.1f} MB" for name, mb in results["storage_mb"].items())
        print(f"on disk (same frames): {sizes}")
    for name, ok in results["targets"].items():
        print(f"target {name}: {'PASS' if ok else 'n/a' if ok is None else 'FAIL'}")


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    legs = [leg for leg in results["legs"] if "error" not in leg]
    workers = sorted({leg["workers"] for leg in legs})
    loaders = [name for name in LOADERS if any(leg["loader"] == name for leg in legs)]
    fig, (ax, cpu_ax) = plt.subplots(1, 2, figsize=(15, 5.5), gridspec_kw={"width_ratios": [2, 1]})
    width = 0.8 / max(len(loaders), 1)
    for k, name in enumerate(loaders):
        xs, ys, cpu_xs, cpu_ys = [], [], [], []
        for i, w in enumerate(workers):
            x = i + (k - (len(loaders) - 1) / 2) * width
            rate, cpu = _rate(legs, name, w), _cpu(legs, name, w)
            if rate is not None:
                xs.append(x)
                ys.append(rate)
            if cpu is not None:
                cpu_xs.append(x)
                cpu_ys.append(cpu)
        bars = ax.bar(xs, ys, width, label=LABELS[name], color=f"C{k}")
        ax.bar_label(bars, fmt="%.0f", fontsize=8)
        cpu_bars = cpu_ax.bar(cpu_xs, cpu_ys, width, color=f"C{k}")
        cpu_ax.bar_label(cpu_bars, fmt="%.1f", fontsize=7)
    ticks = [f"{w} worker{'s' if w > 1 else ''}" for w in workers]
    ax.set_xticks(range(len(workers)), ticks)
    cpu_ax.set_xticks(range(len(workers)), ticks)
    cpu_ax.set_ylabel("CPU ms per sample, whole process tree (lower is better)")
    cpu_ax.set_title("CPU per sample while measuring", fontsize=9)
    ax.set_ylabel("samples/s (3 cams 224x224 + state + 50-step actions)")
    ratio_text = "; ".join(
        f"{w}w: {r['pi_loader_vs_lerobot']}x LeRobot, {r['pi_loader_vs_limit']} of limit"
        for w, r in results["ratios"].items()
    )
    ax.set_title(f"Shuffled samples/s, batch {results['sample']['batch_size']}\n{ratio_text}", fontsize=9)
    flags = [
        f"{'PASS' if ok else 'n/a' if ok is None else 'FAIL'}: {name}"
        for name, ok in results["targets"].items()
    ]
    ttfb = results["time_to_first_batch"].get("first_batch_from_spawn_s")
    if ttfb is not None:
        flags.append(
            f"time to first batch, {results['time_to_first_batch']['episodes']} episodes: {ttfb:.2f} s"
        )
    ax.text(0.01, 0.99, "\n".join(flags), transform=ax.transAxes, va="top", fontsize=7, family="monospace")
    top = max((_rate(legs, n, w) or 0.0) for n in loaders for w in workers)
    ax.set_ylim(0, top * 1.45)  # room above the bars for the legend and the target flags
    ax.legend(fontsize=7, loc="upper right", ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
