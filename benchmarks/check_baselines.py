"""Regression check against the committed baselines: rerun a benchmark in quick mode and fail
when one of its ratios regressed beyond a tolerance.

Only ratios are compared, each measured side by side within one run (two legs of the same run
on the same machine under the same load), never absolute times or rates: this machine is shared
and small, and another machine's absolute figures say nothing about a change. Per benchmark:

| benchmark | ratio (JSON path in its result) | better |
| --- | --- | --- |
| trainer | `ratios.<torch, jax>.speedup_2_vs_0_workers`: samples/s with 2 loader workers / with 0 | higher |
| trainer | `ratios.<torch, jax>.not_waiting_2_workers`: 1 - data-wait fraction with 2 workers | higher |
| loader | `ratios.<1, 2>.pi_loader_vs_lerobot`: pi_loader / LeRobotDataset v3 samples/s | higher |
| loader | `ratios.2.pi_loader_vs_limit`: pi_loader / the raw decode limit, 2 workers | higher |
| scale | `throughput.ratios.2.pi_loader_vs_lerobot`, `throughput.ratios.2.pi_loader_vs_limit` | higher |
| scale | `throughput.bytes_per_sample.read_vs_encoded_chunks`: bytes read / encoded video rows | lower |

A ratio regresses by (baseline - now) / baseline when higher is better, (now - baseline) /
baseline when lower is better; the check fails (exit 1) when any regresses by more than
`--tolerance` (default 0.25, i.e. 25%), naming each and by how much. A ratio the baseline lacks
is reported and skipped; one the new run lacks fails (the leg that measures it broke).

    python -m benchmarks.check_baselines trainer                     # rerun --quick, compare
    python -m benchmarks.check_baselines loader --tolerance 0.3
    python -m benchmarks.check_baselines trainer --current results/trainer.json   # no rerun

Exit codes: 0 within tolerance, 1 a ratio regressed, 2 no baseline or the benchmark failed.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
BASELINES = HERE / "baselines"
# 25%: above the run-to-run spread of most side-by-side ratios on this shared 2-core machine
# (the trainer's not-waiting fraction moved 0.95 -> 0.93, JAX's speed-up from workers 0.89 ->
# 1.01 between two quick runs), so a real regression, not noise, trips it. Noisier ratios (the
# torch speed-up moved 0.89 -> 1.18) keep the lower of such runs as their baseline.
DEFAULT_TOLERANCE = 0.25


@dataclass(frozen=True, slots=True)
class Ratio:
    """One compared ratio: where it is in the result JSON, and which way is better."""

    path: str
    higher_is_better: bool = True


@dataclass(frozen=True, slots=True)
class Benchmark:
    """How to rerun a benchmark in quick mode ({out}: the output folder), what it writes, and
    the ratios compared."""

    module: str
    result: str
    ratios: tuple[Ratio, ...]

    def command(self, out: Path) -> list[str]:
        return [sys.executable, "-m", self.module, "--quick", "--out", str(out)]


BENCHMARKS: dict[str, Benchmark] = {
    "trainer": Benchmark(
        "benchmarks.trainer.run",
        "trainer.json",
        tuple(
            Ratio(f"ratios.{framework}.{name}")
            for framework in ("torch", "jax")
            for name in ("speedup_2_vs_0_workers", "not_waiting_2_workers")
        ),
    ),
    "loader": Benchmark(
        "benchmarks.loader.run",
        "loader.json",
        (
            Ratio("ratios.1.pi_loader_vs_lerobot"),
            Ratio("ratios.2.pi_loader_vs_lerobot"),
            Ratio("ratios.2.pi_loader_vs_limit"),
        ),
    ),
    "scale": Benchmark(
        "benchmarks.scale.run",
        "scale.json",
        (
            Ratio("throughput.ratios.2.pi_loader_vs_lerobot"),
            Ratio("throughput.ratios.2.pi_loader_vs_limit"),
            Ratio("throughput.bytes_per_sample.read_vs_encoded_chunks", higher_is_better=False),
        ),
    ),
}


def lookup(results: Any, path: str) -> float | None:
    """The number at a dotted path of a JSON result, or None where it is missing or not a number.

    Example:
        >>> lookup({"ratios": {"2": {"pi_loader_vs_limit": 0.8}}}, "ratios.2.pi_loader_vs_limit")
        0.8
    """
    node = results
    for key in path.split("."):
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return float(node) if isinstance(node, int | float) and not isinstance(node, bool) else None


def compare(
    benchmark: Benchmark, baseline: dict[str, Any], current: dict[str, Any], tolerance: float
) -> tuple[list[dict[str, Any]], list[str]]:
    """One row per ratio (baseline, now, regression, status) and the failures as sentences.

    Example:
        >>> rows, failures = compare(BENCHMARKS["trainer"], baseline, current, 0.25)
    """
    rows, failures = [], []
    for ratio in benchmark.ratios:
        base, now = lookup(baseline, ratio.path), lookup(current, ratio.path)
        row: dict[str, Any] = {"ratio": ratio.path, "baseline": base, "now": now, "regression": None}
        if base is None:
            row["status"] = "not in baseline (skipped)"
        elif now is None:
            row["status"] = "FAIL: not measured"
            failures.append(f"{ratio.path} was not measured in this run (baseline {base:g})")
        else:
            worse = base - now if ratio.higher_is_better else now - base
            # relative to the baseline; from a baseline of 0 any worsening is unbounded
            regression = worse / abs(base) if base else (float("inf") if worse > 0 else 0.0)
            row["regression"] = round(regression, 4)
            better = "higher" if ratio.higher_is_better else "lower"
            if regression > tolerance:
                row["status"] = "FAIL"
                failures.append(
                    f"{ratio.path} regressed by {regression:.0%}: {now:g} now vs {base:g} in the baseline "
                    f"({better} is better; tolerance {tolerance:.0%})"
                )
            else:
                row["status"] = "ok"
        rows.append(row)
    return rows, failures


def _print(rows: list[dict[str, Any]]) -> None:
    width = max(len(r["ratio"]) for r in rows)
    print(f"{'ratio':<{width}}  {'baseline':>9}  {'now':>9}  {'regression':>10}  status")
    for r in rows:
        base = "-" if r["baseline"] is None else f"{r['baseline']:.4g}"
        now = "-" if r["now"] is None else f"{r['now']:.4g}"
        reg = "-" if r["regression"] is None else f"{r['regression']:+.1%}"
        print(f"{r['ratio']:<{width}}  {base:>9}  {now:>9}  {reg:>10}  {r['status']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.check_baselines", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("name", choices=sorted(BENCHMARKS))
    parser.add_argument("--tolerance", type=float, default=DEFAULT_TOLERANCE, help="e.g. 0.25 = 25%%")
    parser.add_argument("--current", type=Path, default=None, help="compare this result JSON; no rerun")
    parser.add_argument("--baseline", type=Path, default=None, help="default: benchmarks/baselines/NAME.json")
    parser.add_argument("--out", type=Path, default=None, help="where the rerun writes (git-ignored default)")
    args = parser.parse_args(argv)
    if not 0 <= args.tolerance < 10:
        parser.error(f"--tolerance must be in [0, 10), got {args.tolerance}")
    benchmark = BENCHMARKS[args.name]
    baseline_path = args.baseline or BASELINES / benchmark.result
    if not baseline_path.exists():
        print(f"check_baselines: no baseline {baseline_path}: commit one first", file=sys.stderr)
        return 2
    baseline = json.loads(baseline_path.read_text())
    if args.current is not None:
        current_path = args.current
    else:
        out = args.out or BASELINES / "results" / f"check-{time.strftime('%Y%m%dT%H%M%S')}" / args.name
        out.mkdir(parents=True, exist_ok=True)
        command = benchmark.command(out)
        print("check_baselines: " + " ".join(command[1:]), flush=True)
        if subprocess.run(command, cwd=ROOT).returncode != 0:
            print(f"check_baselines: the {args.name} benchmark failed", file=sys.stderr)
            return 2
        current_path = out / benchmark.result
    current = json.loads(current_path.read_text())
    if baseline.get("mode") and current.get("mode") and baseline["mode"] != current["mode"]:
        print(f"note: the baseline ran in {baseline['mode']} mode, this run in {current['mode']} mode")
    rows, failures = compare(benchmark, baseline, current, args.tolerance)
    _print(rows)
    if failures:
        print(
            f"\n{args.name}: {len(failures)} ratio(s) regressed beyond {args.tolerance:.0%}:", file=sys.stderr
        )
        for failure in failures:
            print(f"  {failure}", file=sys.stderr)
        return 1
    print(f"\n{args.name}: every ratio within {args.tolerance:.0%} of {baseline_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
