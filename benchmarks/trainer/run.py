"""Trainer benchmark: data-wait fraction and samples/s of the reference policy (pi_train) with 0, 1
and 2 pi_loader workers, in torch and JAX, on the CPU.

The lake is the loader benchmark's (simulator -> featurize -> LakeWriter: 3 cameras at 224x224,
proprio and actions at 15 Hz, intra-only H.264), built once per configuration and cached. Each
(framework, workers) leg is one fresh `python -m pi_train CONFIG.json` process, so no leg warms
another's caches or JIT; it trains the reference policy for a fixed number of steps (batch 32,
16-step action chunk, every camera at the stored 224x224) and its step-time decomposition
(`summary.json`: per-step data wait, host-to-device, compute, checkpoint, other; the first step,
with compilation and worker start-up, apart) gives the figures. Compute runs on one thread in
every torch leg (`threads=1`), so that the worker count is the only thing that changes between
legs (pi_train's own default gives the step the cores the workers leave, which would change the
compute side too); JAX uses XLA's own thread pool.

    python -m benchmarks.trainer.run --quick --out DIR     # 6 episodes, 12 steps a leg (minutes)
    python -m benchmarks.trainer.run                        # 12 episodes, 40 steps a leg

Prints a table, writes DIR/trainer.json and DIR/trainer.png. Every leg runs `--repeats` times
(at least 3), the legs interleaved (`benchmarks._figures.interleaved`: one of each per repeat, the
order rotated), and every figure is the median with its spread over the repeats. The ratios it
reports (compared by `python -m benchmarks.check_baselines trainer` with the same rule):
`<framework>.speedup_2_vs_0_workers` (samples/s with 2 workers / with 0, repeat by repeat) and
`<framework>.not_waiting_2_workers` (1 - the data-wait fraction with 2 workers).
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


def _leg(lake: Path, out: Path, framework: str, workers: int, steps: int, repeat: int) -> dict[str, Any]:
    run = _legs.fresh_run(out / "legs" / f"{framework}-w{workers}-r{repeat}")
    (run / "config.json").write_text(_legs.leg_config(lake, run, framework, steps, workers=workers).to_json())
    wall = _legs.run_leg(
        [sys.executable, "-m", "pi_train", str(run / "config.json")], what=f"{framework} / {workers} workers"
    )
    return {
        "framework": framework,
        "workers": workers,
        "repeat": repeat,
        **_legs.leg_figures(run, samples_per_step=BATCH, wall_s=wall),
    }


def _runs_of(runs: list[dict[str, Any]], framework: str, workers: int) -> list[dict[str, Any]]:
    return _legs.runs_of(runs, framework, "workers", workers)


def summarize(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per (framework, workers): its runs in repeat order and the median with spread
    of samples/s, data-wait fraction and compute ms per step."""
    legs = []
    for framework, workers in sorted({(r["framework"], r["workers"]) for r in runs}):
        mine = _runs_of(runs, framework, workers)
        what = f"{framework}, {workers} workers"
        legs.append(
            {
                "framework": framework,
                "workers": workers,
                "samples_per_s": spread([r["samples_per_s"] for r in mine], what=what).to_json(),
                "data_wait_fraction": spread([r["data_wait_fraction"] for r in mine], what=what).to_json(),
                "compute_ms_per_step": spread(
                    [r["ms_per_step"]["compute"] for r in mine], what=what
                ).to_json(),
                "verdicts": sorted({r["verdict"] for r in mine}),
                "runs": mine,
            }
        )
    return legs


def ratios(runs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The ratios per framework (see the module docstring), each a median with its spread over
    the interleaved repeats; None where a leg did not run.

    Example:
        >>> ratios(results["runs"])["torch"]["speedup_2_vs_0_workers"]["median"]
        1.08
    """
    out: dict[str, dict[str, Any]] = {}
    for framework in sorted({r["framework"] for r in runs}):

        def of(workers: int, key: str, fw: str = framework) -> list[float]:
            return [float(r[key]) for r in _runs_of(runs, fw, workers)]

        zero, two = of(0, "samples_per_s"), of(2, "samples_per_s")
        wait0, wait2 = of(0, "data_wait_fraction"), of(2, "data_wait_fraction")
        out[framework] = {
            "speedup_2_vs_0_workers": ratio(two, zero, what=f"{framework}: 2 workers / 0").to_json()
            if zero and two
            else None,
            "not_waiting_2_workers": spread([1 - w for w in wait2], what=framework).to_json()
            if two
            else None,
            "data_wait_fraction_0_workers": spread(wait0, what=framework).to_json() if zero else None,
            "data_wait_fraction_2_workers": spread(wait2, what=framework).to_json() if two else None,
        }
    return out


def print_table(results: dict[str, Any]) -> None:
    print(f"\ntrainer benchmark ({results['mode']}): batch {BATCH}, 3 cameras 224x224, CPU")
    print(f"median (min-max) of {results['config']['repeats']} interleaved repeats")
    print(f"{'framework':<10}{'workers':>8}{'samples/s':>22}{'data wait':>24}{'compute ms':>24}")
    for leg in results["legs"]:
        sps, wait, compute = (leg[k] for k in ("samples_per_s", "data_wait_fraction", "compute_ms_per_step"))
        print(
            f"{leg['framework']:<10}{leg['workers']:>8}"
            f"{sps['median']:>8.1f} ({sps['min']:.1f}-{sps['max']:.1f}){'':>2}"
            f"{wait['median']:>8.1%} ({wait['min']:.1%}-{wait['max']:.1%})"
            f"{compute['median']:>8.0f} ({compute['min']:.0f}-{compute['max']:.0f})"
        )
    for framework, r in results["ratios"].items():
        for name, s in r.items():
            if s is not None:
                print(f"  {framework} {name}: {s['median']:.3g} ({s['min']:.3g}-{s['max']:.3g})")


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    frameworks = sorted({leg["framework"] for leg in results["legs"]})
    width = 0.8 / max(len(frameworks), 1)
    for i, framework in enumerate(frameworks):
        legs = [leg for leg in results["legs"] if leg["framework"] == framework]
        xs = [leg["workers"] + (i - (len(frameworks) - 1) / 2) * width for leg in legs]
        for ax, key, scale in ((left, "samples_per_s", 1.0), (right, "data_wait_fraction", 100.0)):
            med = [scale * leg[key]["median"] for leg in legs]
            err = [
                [m - scale * leg[key]["min"] for m, leg in zip(med, legs, strict=True)],
                [scale * leg[key]["max"] - m for m, leg in zip(med, legs, strict=True)],
            ]
            ax.bar(xs, med, width=width, yerr=err, capsize=3, label=framework)
    for ax, label in ((left, "samples/s"), (right, "data wait, % of step time")):
        ax.set_xlabel("pi_loader workers")
        ax.set_ylabel(label)
        ax.set_xticks(sorted({leg["workers"] for leg in results["legs"]}))
        ax.legend(fontsize=8)
    fig.suptitle(f"reference policy on the CPU ({results['mode']}, batch {BATCH}, 3 x 224x224)", fontsize=10)
    _legs.save_figure(fig, path)


def main(argv: list[str] | None = None) -> int:
    parser = _legs.leg_parser(
        __doc__, quick="6 episodes, 12 steps a leg", steps="steps per leg (default: by mode)"
    )
    parser.add_argument("--frameworks", default="torch,jax")
    parser.add_argument("--workers", default="0,1,2")
    args = _legs.parse_leg_arguments(parser, argv)
    mode, settings, data = _legs.mode_data(args.quick)
    steps = args.steps or settings["steps"]
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    lake = _legs.mode_lake(data)
    runs = []
    plan = [(f, int(w)) for f in args.frameworks.split(",") for w in args.workers.split(",")]
    for repeat, (framework, workers) in interleaved(plan, args.repeats):
        print(f"leg: {framework}, {workers} workers, {steps} steps (repeat {repeat + 1})", flush=True)
        runs.append(_leg(lake, args.out, framework, workers, steps, repeat))
    results = {
        "benchmark": "trainer",
        "mode": mode,
        "data": {**_legs.data_json(data), "rate_hz": data.rate_hz},
        "config": {
            "batch_size": BATCH,
            "action_horizon": HORIZON,
            "steps": steps,
            "torch_threads": 1,
            "repeats": args.repeats,
        },
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "load_avg": os.getloadavg()},
        "legs": summarize(runs),
        "ratios": ratios(runs),
        "elapsed_s": round(time.monotonic() - started, 1),
    }
    _legs.write_results(results, args.out, "trainer", plot, print_table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
