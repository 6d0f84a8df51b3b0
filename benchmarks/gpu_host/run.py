"""GPU-host benchmark: does pi_loader feed an accelerator? (issue 23, decision 12)

One prepared command for a 16-core GPU host (it also dry-runs on the CPU):

    python -m benchmarks.gpu_host.run --out DIR                  # the GPU host: ~5 min
    python -m benchmarks.gpu_host.run --quick --device cpu --out DIR   # a dry run here

1. A lake made the way the stream job makes it (fleet simulator -> featurize -> LakeWriter): by
   default 32 episodes of 8 s, 3 cameras at 224x224, intra-only H.264, 15 Hz.
2. The loader legs, each a fresh process (`benchmarks.loader._legs`), interleaved repeat after
   repeat (`benchmarks._figures.interleaved`): the raw decode limit (the same chunks in memory,
   PyAV's rgb24, nothing else: `raw --rgb24`) and pi_loader with default settings (only
   `num_workers` set), at each worker count. pi_loader's share of the limit is the ratio of the
   two legs repeat by repeat (median and spread); time to first batch is from the leg's process
   start (interpreter, imports, Dataset open, workers, first batch).
3. The reference trainer (`python -m pi_train`), torch and JAX, at batch 32 and 128, default
   workers, on the device: its own step decomposition (data wait, exposed host-to-device copy,
   compute), repeated and interleaved the same way.

Writes DIR/gpu_host.json (figures as spreads, `targets` judged by `benchmarks._figures.judge`:
met only when the whole spread clears the threshold) and DIR/gpu_host.png.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks._figures import MIN_REPEATS, interleaved, ratio, spread
from benchmarks.gpu_host._report import explain, plot, targets
from benchmarks.loader._data import DataConfig, build_lake
from benchmarks.loader._runner import run_leg

ROOT = Path(__file__).resolve().parents[2]
HORIZON = 50


def _log(message: str) -> None:
    print(f"[gpu_host {time.strftime('%H:%M:%S')}] {message}", flush=True)


def _env() -> dict[str, str]:
    # Legs import from the checkout (format, loader, catalog, ingest, jobs, benchmarks) and,
    # on a GPU host, from the wheels put on PYTHONPATH by the caller.
    paths = [str(ROOT / p) for p in ("format", "loader", "catalog", "ingest", "jobs")] + [str(ROOT)]
    extra = os.environ.get("PYTHONPATH")
    env = dict(
        os.environ,
        OPENBLAS_NUM_THREADS="1",
        PYTHONPATH=os.pathsep.join([*paths, *([extra] if extra else [])]),
    )
    for name in ("RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    return env


def machine() -> dict[str, Any]:
    """What ran it: cores, memory, the accelerator and library versions."""
    info: dict[str, Any] = {"cores": os.cpu_count(), "python": platform.python_version()}
    try:
        import psutil  # type: ignore[import-untyped]

        info["memory_gb"] = round(psutil.virtual_memory().total / 2**30, 1)
    except ImportError:
        pass
    for name in ("numpy", "pyarrow", "deltalake", "av", "torch", "jax"):
        try:
            module = __import__(name)
            info[name] = getattr(module, "__version__", "?")
        except ImportError:
            info[name] = None
    try:
        import torch

        info["gpu"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except ImportError:
        info["gpu"] = None
    return info


def build_lake_parallel(data: DataConfig, root: Path, processes: int) -> Path:
    """The lake of `build_lake` (same episodes, same writer, one commit per episode), with the
    episodes simulated and featurized by `processes` processes at once: on a 16-core host the
    32-episode lake takes seconds instead of a minute and a half of the benchmark's time."""
    import concurrent.futures
    import multiprocessing

    from pi_format import LakeLayout
    from pi_format.lake import LakeWriter

    from benchmarks.loader._data import _featurized, _simulation

    lake = root / "lake"
    if lake.exists():
        import shutil

        shutil.rmtree(lake)
    sim = _simulation(data, data.episodes, data.duration_s)
    writer = LakeWriter(LakeLayout(str(lake)))
    context = multiprocessing.get_context("spawn")  # this process may run JAX/CUDA threads
    with concurrent.futures.ProcessPoolExecutor(processes, mp_context=context) as pool:
        futures = [pool.submit(_featurized, data, sim, i) for i in range(data.episodes)]
        for i, future in enumerate(futures):  # committed in episode order, as build_lake does
            writer.commit_episode(future.result())  # type: ignore[arg-type]
            if (i + 1) % 8 == 0 or i + 1 == data.episodes:
                _log(f"lake: {i + 1}/{data.episodes} episodes committed")
    return lake


# -- loader legs -----------------------------------------------------------------------------


def loader_legs(lake: Path, workers: list[int], repeats: int, measure_s: float, batch: int) -> dict[str, Any]:
    legs = [(kind, w) for w in workers for kind in ("raw", "pi_loader")]
    runs: dict[tuple[str, int], list[dict[str, Any]]] = {leg: [] for leg in legs}
    for repeat, (kind, w) in interleaved(legs, repeats):
        command = [sys.executable, "-m", "benchmarks.loader._legs", kind, "--lake", str(lake)]
        command += ["--workers", str(w), "--batch-size", str(batch), "--horizon", str(HORIZON)]
        command += ["--measure-s", str(measure_s), "--warmup-batches", "3"]
        if kind == "raw":
            command.append("--rgb24")
        result = run_leg(command, timeout_s=120 + 4 * measure_s, env=_env())
        if "error" in result:
            raise RuntimeError(f"leg {kind} with {w} workers failed (repeat {repeat}): {result['error']}")
        runs[(kind, w)].append(result)
        _log(
            f"repeat {repeat} {kind:9s} {w:2d} workers: {result['samples_per_s']:8.0f} samples/s, "
            f"first batch {result['first_batch_from_spawn_s']:.2f} s from process start"
        )
    table: dict[str, Any] = {}
    for w in workers:
        raw, ours = runs[("raw", w)], runs[("pi_loader", w)]
        table[str(w)] = {
            "raw_samples_per_s": spread([r["samples_per_s"] for r in raw], what=f"raw {w}").to_json(),
            "pi_loader_samples_per_s": spread(
                [r["samples_per_s"] for r in ours], what=f"pi_loader {w}"
            ).to_json(),
            "share_of_limit": ratio(
                [r["samples_per_s"] for r in ours], [r["samples_per_s"] for r in raw], what=f"share {w}"
            ).to_json(),
            "pi_loader_first_batch_s": spread(
                [r["first_batch_from_spawn_s"] for r in ours], what=f"ttfb {w}"
            ).to_json(),
            "raw_first_batch_s": spread(
                [r["first_batch_from_spawn_s"] for r in raw], what=f"raw ttfb {w}"
            ).to_json(),
            "pi_loader_open_s": spread([r["open_s"] for r in ours], what=f"open {w}").to_json(),
            "pi_loader_peak_memory_mb": spread(
                [r["peak_memory_mb"] for r in ours], what=f"mem {w}"
            ).to_json(),
            "api": ours[0].get("api"),
        }
    return table


# -- trainer legs ----------------------------------------------------------------------------


def _trainer_leg(
    lake: Path, out: Path, framework: str, batch: int, steps: int, device: str, repeat: int
) -> dict[str, Any]:
    from pi_train import TrainConfig

    run = out / "trainer" / f"{framework}-b{batch}-r{repeat}"
    if run.exists():
        import shutil

        shutil.rmtree(run)
    run.mkdir(parents=True)
    config = TrainConfig(
        lake=str(lake),
        framework=framework,  # type: ignore[arg-type]
        steps=steps,
        batch_size=batch,
        action_horizon=HORIZON,
        checkpoint_every=0,
        log_every=max(steps // 4, 1),
        out_dir=str(run),
        device=device,
        plot=False,
    )
    (run / "config.json").write_text(config.to_json())
    env = _env()
    if framework == "jax" and device == "cpu":
        env["JAX_PLATFORMS"] = "cpu"
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "pi_train", str(run / "config.json")],
        env=env,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-20:])
        raise RuntimeError(f"pi_train {framework} batch {batch} failed:\n{tail}")
    summary = json.loads((run / "summary.json").read_text())
    ms = summary["ms_per_step"]
    stepping = ms["total"] - ms["checkpoint"]  # the one final checkpoint is not a step's cost
    return {
        "wall_s": time.monotonic() - started,
        "samples_per_s": batch / stepping * 1e3 if stepping > 0 else 0.0,
        "ms": ms,
        "input_fraction": (ms["data_wait"] + ms["h2d"]) / stepping if stepping > 0 else 0.0,
        "verdict": summary["verdict"],
        "device": summary.get("device"),
        "library": summary.get("library"),
        "workers": summary.get("workers"),
    }


def trainer_legs(
    lake: Path, out: Path, frameworks: list[str], batches: list[int], repeats: int, steps: int, device: str
) -> dict[str, Any]:
    legs = [(f, b) for f in frameworks for b in batches]
    runs: dict[tuple[str, int], list[dict[str, Any]]] = {leg: [] for leg in legs}
    for repeat, (framework, batch) in interleaved(legs, repeats):
        result = _trainer_leg(
            lake, out, framework, batch, steps if batch <= 32 else max(steps * 2 // 3, 10), device, repeat
        )
        runs[(framework, batch)].append(result)
        ms = result["ms"]
        _log(
            f"repeat {repeat} {framework:5s} batch {batch:3d}: {result['samples_per_s']:7.0f} samples/s, "
            f"data wait {ms['data_wait']:.2f} ms + exposed copy {ms['h2d']:.2f} ms + "
            f"compute {ms['compute']:.2f} ms "
            f"({result['input_fraction']:.1%} input) -- {result['verdict']}"
        )
    table: dict[str, Any] = {}
    for (framework, batch), results in runs.items():
        parts = {
            part: spread([r["ms"][part] for r in results], what=f"{framework} {batch} {part}").to_json()
            for part in ("data_wait", "h2d", "compute", "other", "total")
        }
        table[f"{framework}_b{batch}"] = {
            "framework": framework,
            "batch_size": batch,
            "samples_per_s": spread([r["samples_per_s"] for r in results], what="rate").to_json(),
            "input_fraction": spread([r["input_fraction"] for r in results], what="input").to_json(),
            "ms_per_step": parts,
            "verdicts": [r["verdict"] for r in results],
            "device": results[0]["device"],
            "library": results[0]["library"],
            "workers": results[0]["workers"],
            # what the step asks of the loader: batch / compute time (a wait-free step needs this)
            "demand_samples_per_s": spread(
                [batch / r["ms"]["compute"] * 1e3 for r in results if r["ms"]["compute"] > 0], what="demand"
            ).to_json(),
        }
    return table


# -- main ------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "gpu_host" / "results")
    parser.add_argument(
        "--lake", type=Path, default=None, help="an existing lake (default: build one in OUT)"
    )
    parser.add_argument("--quick", action="store_true", help="a dry run: 4 short episodes, 1 and 2 workers")
    parser.add_argument("--device", default="auto", help="trainer device: auto, cuda or cpu")
    parser.add_argument("--workers", default="1,4,8,14", help="loader worker counts")
    parser.add_argument("--repeats", type=int, default=MIN_REPEATS)
    parser.add_argument("--trainer-repeats", type=int, default=MIN_REPEATS)
    parser.add_argument("--measure-s", type=float, default=2.5)
    parser.add_argument("--trainer-steps", type=int, default=120)
    parser.add_argument("--frameworks", default="torch,jax")
    parser.add_argument("--batches", default="32,128", help="trainer batch sizes")
    parser.add_argument("--rejudge", type=Path, default=None, help="recompute targets and the plot of a JSON")
    args = parser.parse_args(argv)
    if args.rejudge is not None:
        judged: dict[str, Any] = json.loads(args.rejudge.read_text())
        judged["targets"] = targets(judged["loader"], judged["trainer"])
        explain(judged)
        args.rejudge.write_text(json.dumps(judged, indent=1))
        plot(judged, args.rejudge.with_suffix(".png"))
        return 0
    started = time.monotonic()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    if args.quick:
        data = DataConfig(episodes=4, duration_s=4.0, rate_hz=15.0, size_px=224)
        workers, batches = [1, 2], [8, 16]
    else:
        data = DataConfig(episodes=32, duration_s=8.0, rate_hz=15.0, size_px=224)
        workers, batches = (
            [int(w) for w in args.workers.split(",")],
            [int(b) for b in args.batches.split(",")],
        )
    info = machine()
    _log(f"machine: {info}")
    lake = args.lake
    if lake is None:
        t = time.monotonic()
        processes = max(1, min((os.cpu_count() or 1) - 1, data.episodes))
        lake = (
            build_lake(data, out / "data")
            if processes < 4
            else build_lake_parallel(data, out / "data", processes)
        )
        _log(f"lake {lake} ready in {time.monotonic() - t:.1f} s")
    loader = loader_legs(lake, workers, args.repeats, args.measure_s, batch=32 if not args.quick else 8)
    _log(f"loader legs done at {time.monotonic() - started:.0f} s")
    partial = {"benchmark": "gpu_host", "machine": info, "loader": loader, "trainer": {}, "partial": True}
    (out / "gpu_host.json").write_text(
        json.dumps(partial, indent=1)
    )  # kept if the trainer legs run out of time
    trainer = trainer_legs(
        lake, out, args.frameworks.split(","), batches, args.trainer_repeats, args.trainer_steps, args.device
    )
    result: dict[str, Any] = {
        "benchmark": "gpu_host",
        "machine": info,
        "data": {**dataclasses.asdict(data), "lake": str(lake)},
        "settings": {
            "loader_batch_size": 32 if not args.quick else 8,
            "action_horizon": HORIZON,
            "repeats": args.repeats,
            "trainer_repeats": args.trainer_repeats,
            "measure_s": args.measure_s,
            "trainer_steps": args.trainer_steps,
            "quick": args.quick,
        },
        "loader": loader,
        "trainer": trainer,
        "elapsed_s": round(time.monotonic() - started, 1),
    }
    result["targets"] = targets(loader, trainer)
    explain(result)
    (out / "gpu_host.json").write_text(json.dumps(result, indent=1))
    plot(result, out / "gpu_host.png")
    _log(f"wrote {out / 'gpu_host.json'} and gpu_host.png in {result['elapsed_s']} s")
    for name, target in result["targets"].items():
        figure = (
            f"median {target['median']:.4g} ({target['min']:.4g}-{target['max']:.4g})"
            if "median" in target
            else ""
        )
        print(f"  {name:45s} {target['verdict']:12s} {target['rule']:50s} {figure}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
