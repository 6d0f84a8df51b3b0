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

import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks._figures import interleaved, ratio, spread
from benchmarks.trainer import _legs
from benchmarks.trainer._legs import BATCH, HORIZON

_LAUNCH = (
    "import sys; from pi_train import TrainConfig, launch; "
    "sys.exit(launch(TrainConfig.from_json(open(sys.argv[1]).read()), int(sys.argv[2])))"
)


def _leg(lake: Path, out: Path, framework: str, nproc: int, steps: int, repeat: int) -> dict[str, Any]:
    run = _legs.fresh_run(out / "scaling-legs" / f"{framework}-n{nproc}-r{repeat}")
    config = _legs.leg_config(
        lake,
        run,
        framework,
        steps,
        workers=0,  # the loader in the training loop: one process, one core of work
        device="cpu",
        plot=False,
    )
    path = run.parent / f"{run.name}.json"
    path.write_text(config.to_json())
    wall = _legs.run_leg(
        [sys.executable, "-c", _LAUNCH, str(path), str(nproc)], what=f"{framework} x {nproc}"
    )
    return {
        "framework": framework,
        "nproc": nproc,
        "repeat": repeat,
        "global_batch": BATCH * nproc,
        **_legs.leg_figures(run, samples_per_step=BATCH * nproc, wall_s=wall),
        "load_avg_after": os.getloadavg()[0],
    }


def _runs_of(runs: list[dict[str, Any]], framework: str, nproc: int) -> list[dict[str, Any]]:
    return _legs.runs_of(runs, framework, "nproc", nproc)


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
    _legs.save_figure(fig, path)


def main(argv: list[str] | None = None) -> int:
    parser = _legs.leg_parser(
        __doc__, quick="the trainer benchmark's quick lake", steps="steps per leg (default: 2x the mode's)"
    )
    parser.add_argument("--frameworks", default="torch")
    parser.add_argument("--nproc", default="1,2", help="process counts, comma-separated (1 is the base)")
    args = _legs.parse_leg_arguments(parser, argv)
    counts = sorted({int(n) for n in args.nproc.split(",")})
    if counts[0] != 1:
        parser.error(f"--nproc must include 1 (the base of the efficiency), got {args.nproc!r}")
    mode, settings, data = _legs.mode_data(args.quick)
    steps = args.steps or 2 * settings["steps"]
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    lake = _legs.mode_lake(data)
    load_before = os.getloadavg()
    runs = []
    plan = [(f, n) for f in args.frameworks.split(",") for n in counts]
    for repeat, (framework, nproc) in interleaved(plan, args.repeats):
        print(f"leg: {framework} x {nproc} processes, {steps} steps (repeat {repeat + 1})", flush=True)
        runs.append(_leg(lake, args.out, framework, nproc, steps, repeat))
    results = {
        "benchmark": "trainer_scaling",
        "mode": mode,
        "data": _legs.data_json(data),
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
    _legs.write_results(results, args.out, "trainer_scaling", plot, print_table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
