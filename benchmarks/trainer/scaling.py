"""Trainer scaling curve: samples/s and efficiency of data-parallel pi_train at 1 and 2 processes
(and more where the host has the cores) on the same data.

The lake is the trainer benchmark's (`benchmarks.trainer.run`: 3 cameras at 224x224, proprio and
actions at 15 Hz). Each leg is one `pi_train.launch(config, N)` in a fresh process tree: N
processes in one torch.distributed (gloo) or jax.distributed group, each reading its own shard of
the one snapshot with the loader in its training loop (`workers=0`) and one compute thread
(`threads=1`), so a process is one core's worth of work and N processes ask for N cores. The
batch per process is fixed (32): N processes train a global batch of 32 x N (weak scaling, as
data parallel is used). A leg's samples/s is the global batch over the median step time of its
measured steps (the first step, with start-up and compilation, apart; the checkpoint after the
last step left out), from rank 0's `summary.json`, which takes each step's maximum over ranks.

Efficiency at N = samples/s at N / (N x samples/s at 1), repeat by repeat (the legs interleaved,
`benchmarks._figures`): 1.0 is perfect scaling. On a host with fewer free cores than N processes
the figure says how far CPU contention and the gradient all-reduce take it below 1.

    python -m benchmarks.trainer.scaling --quick                  # torch, 1 and 2 processes, 3 repeats
    python -m benchmarks.trainer.scaling --frameworks torch,jax --nproc 1,2,4 --repeats 5

Prints a table and writes OUT/trainer_scaling.json and OUT/trainer_scaling.png
(OUT: benchmarks/trainer/results by default; the committed copy is
benchmarks/baselines/trainer_scaling.json).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks._figures import MIN_REPEATS, interleaved, ratio, spread
from benchmarks.loader._data import DataConfig, build_lake
from benchmarks.trainer.run import BATCH, HORIZON, MODES

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
_LAUNCH = (
    "import sys; from pi_train import TrainConfig, launch; "
    "sys.exit(launch(TrainConfig.from_json(open(sys.argv[1]).read()), int(sys.argv[2])))"
)


def _leg(lake: Path, out: Path, framework: str, nproc: int, steps: int, repeat: int) -> dict[str, Any]:
    from pi_train import TrainConfig

    run = out / "scaling-legs" / f"{framework}-n{nproc}-r{repeat}"
    if run.exists():
        shutil.rmtree(run)
    run.mkdir(parents=True)
    config = TrainConfig(
        lake=str(lake),
        framework=framework,  # type: ignore[arg-type]
        steps=steps,
        batch_size=BATCH,
        action_horizon=HORIZON,
        workers=0,  # the loader in the training loop: one process, one core of work
        threads=1,
        device="cpu",
        checkpoint_every=0,  # one checkpoint, after the last step (left out below)
        log_every=max(steps // 4, 1),
        plot=False,
        out_dir=str(run),
    )
    path = run.parent / f"{run.name}.json"
    path.write_text(config.to_json())
    # the checkout first, then the caller's path (a GPU host's packages carried on PYTHONPATH)
    path_ = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", PYTHONPATH=path_)
    for name in ("RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", _LAUNCH, str(path), str(nproc)], env=env, capture_output=True, text=True
    )
    wall = time.monotonic() - start
    if done.returncode != 0:
        raise RuntimeError(f"leg {framework} x {nproc} failed:\n{(done.stdout + done.stderr)[-3000:]}")
    summary = json.loads((run / "summary.json").read_text())
    ms = summary["ms_per_step"]
    step_ms = ms["total"] - ms["checkpoint"]
    return {
        "framework": framework,
        "nproc": nproc,
        "repeat": repeat,
        "global_batch": BATCH * nproc,
        "steps_measured": summary["steps"],
        "samples_per_s": round(BATCH * nproc / (step_ms / 1e3), 2),
        "ms_per_step": ms,
        "data_wait_fraction": round(ms["data_wait"] / step_ms, 4),
        "verdict": summary["verdict"],
        "library": summary.get("library"),
        "wall_s": round(wall, 1),
        "load_avg_after": os.getloadavg()[0],
    }


def _runs_of(runs: list[dict[str, Any]], framework: str, nproc: int) -> list[dict[str, Any]]:
    mine = [r for r in runs if (r["framework"], r["nproc"]) == (framework, nproc)]
    return sorted(mine, key=lambda r: int(r["repeat"]))


def summarize(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per (framework, nproc): samples/s, step ms, data wait (median, spread) and the
    efficiency against 1 process of the same framework, repeat by repeat."""
    legs = []
    for framework, nproc in sorted({(r["framework"], r["nproc"]) for r in runs}):
        mine, one = _runs_of(runs, framework, nproc), _runs_of(runs, framework, 1)
        what = f"{framework} x {nproc}"
        rates = [r["samples_per_s"] for r in mine]
        step_ms = [r["ms_per_step"]["total"] - r["ms_per_step"]["checkpoint"] for r in mine]
        efficiency = None
        if one and len(one) == len(mine):
            ideal = [nproc * r["samples_per_s"] for r in one]
            efficiency = ratio(rates, ideal, what=f"{what} / ({nproc} x 1 process)").to_json()
        legs.append(
            {
                "framework": framework,
                "nproc": nproc,
                "global_batch": BATCH * nproc,
                "samples_per_s": spread(rates, what=what).to_json(),
                "step_ms": spread(step_ms, what=what).to_json(),
                "data_wait_fraction": spread([r["data_wait_fraction"] for r in mine], what=what).to_json(),
                "efficiency": efficiency,
                "verdicts": sorted({r["verdict"] for r in mine}),
                "runs": mine,
            }
        )
    return legs


def print_table(results: dict[str, Any]) -> None:
    print(f"\ntrainer scaling ({results['mode']}): batch {BATCH} per process, 3 cameras 224x224, CPU")
    print(f"median (min-max) of {results['config']['repeats']} interleaved repeats; {os.cpu_count()} CPUs")
    print(f"{'framework':<10}{'procs':>6}{'samples/s':>24}{'step ms':>22}{'efficiency':>24}")
    for leg in results["legs"]:
        sps, ms, eff = leg["samples_per_s"], leg["step_ms"], leg["efficiency"]
        eff_text = f"{eff['median']:.2f} ({eff['min']:.2f}-{eff['max']:.2f})" if eff else "-"
        print(
            f"{leg['framework']:<10}{leg['nproc']:>6}"
            f"{sps['median']:>10.1f} ({sps['min']:.1f}-{sps['max']:.1f})"
            f"{ms['median']:>10.0f} ({ms['min']:.0f}-{ms['max']:.0f})"
            f"{eff_text:>24}"
        )


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for framework in sorted({leg["framework"] for leg in results["legs"]}):
        legs = [leg for leg in results["legs"] if leg["framework"] == framework]
        xs = [leg["nproc"] for leg in legs]
        for ax, key in ((left, "samples_per_s"), (right, "efficiency")):
            shown = [(x, leg[key]) for x, leg in zip(xs, legs, strict=True) if leg[key]]
            med = [s["median"] for _, s in shown]
            err = [[m - s["min"] for m, (_, s) in zip(med, shown, strict=True)],
                   [s["max"] - m for m, (_, s) in zip(med, shown, strict=True)]]  # fmt: skip
            ax.errorbar([x for x, _ in shown], med, yerr=err, marker="o", capsize=3, label=framework)
        base = legs[0]["samples_per_s"]["median"] if legs and legs[0]["nproc"] == 1 else None
        if base:
            left.plot(xs, [base * x for x in xs], ":", color="grey", label=f"{framework} ideal")
    right.axhline(1.0, color="grey", linestyle=":")
    for ax, label in ((left, "samples/s (global)"), (right, "efficiency (1 = linear)")):
        ax.set_xlabel("processes (data parallel)")
        ax.set_ylabel(label)
        ax.set_xticks(sorted({leg["nproc"] for leg in results["legs"]}))
        ax.legend(fontsize=8)
    fig.suptitle(
        f"pi_train scaling on {results['machine']['cpus']} CPUs ({results['mode']}, "
        f"batch {BATCH} per process)",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the trainer benchmark's quick lake")
    parser.add_argument("--out", type=Path, default=HERE / "results")
    parser.add_argument("--frameworks", default="torch")
    parser.add_argument("--nproc", default="1,2", help="process counts, comma-separated (1 is the base)")
    parser.add_argument("--steps", type=int, default=None, help="steps per leg (default: 2x the mode's)")
    parser.add_argument(
        "--repeats", type=int, default=MIN_REPEATS, help=f"runs of every leg, interleaved (>= {MIN_REPEATS})"
    )
    args = parser.parse_args(argv)
    if args.repeats < MIN_REPEATS:
        parser.error(f"--repeats must be >= {MIN_REPEATS} (a median with its spread), got {args.repeats}")
    counts = sorted({int(n) for n in args.nproc.split(",")})
    if counts[0] != 1:
        parser.error(f"--nproc must include 1 (the base of the efficiency), got {args.nproc!r}")
    mode = "quick" if args.quick else "full"
    settings = MODES[mode]
    steps = args.steps or 2 * settings["steps"]
    data = DataConfig(episodes=settings["episodes"], duration_s=settings["duration_s"], rate_hz=15.0)
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    lake = build_lake(data, HERE / "results" / "data" / data.key)
    load_before = os.getloadavg()
    runs = []
    plan = [(f, n) for f in args.frameworks.split(",") for n in counts]
    for repeat, (framework, nproc) in interleaved(plan, args.repeats):
        print(f"leg: {framework} x {nproc} processes, {steps} steps (repeat {repeat + 1})", flush=True)
        runs.append(_leg(lake, args.out, framework, nproc, steps, repeat))
    results = {
        "benchmark": "trainer_scaling",
        "mode": mode,
        "data": {
            "episodes": data.episodes,
            "samples": data.episodes * int(data.duration_s * data.rate_hz),
            "cameras": 3,
            "frame": f"{data.size_px}x{data.size_px}x3 uint8",
        },
        "config": {
            "batch_size_per_process": BATCH,
            "action_horizon": HORIZON,
            "steps": steps,
            "workers": 0,
            "threads_per_process": 1,
            "repeats": args.repeats,
            "backend": "gloo (torch) / jax.distributed (CPU)",
        },
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "load_avg": load_before},
        "legs": summarize(runs),
        "elapsed_s": round(time.monotonic() - started, 1),
    }
    (args.out / "trainer_scaling.json").write_text(json.dumps(results, indent=2))
    plot(results, args.out / "trainer_scaling.png")
    print_table(results)
    print(f"wrote {args.out / 'trainer_scaling.json'} and {args.out / 'trainer_scaling.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
