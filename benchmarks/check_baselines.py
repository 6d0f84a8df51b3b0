"""Regression check against the committed baselines: rerun a benchmark in quick mode and fail
when one of its ratios regressed beyond a tolerance.

Only ratios are compared, each measured side by side within one run (legs interleaved, at least
3 repeats each, reported as the median with its spread: `benchmarks._figures`), never absolute
times or rates: this machine is shared and small, and another machine's absolute figures say
nothing about a change. Per benchmark:

| benchmark | ratio (JSON path in its result) | better |
| --- | --- | --- |
| trainer | `ratios.<torch, jax>.speedup_2_vs_0_workers`: samples/s with 2 loader workers / with 0 | higher |
| trainer | `ratios.<torch, jax>.not_waiting_2_workers`: 1 - data-wait fraction with 2 workers | higher |
| loader | `ratios.<1, 2>.pi_loader_vs_lerobot`: pi_loader / LeRobotDataset v3 samples/s | higher |
| loader | `ratios.2.pi_loader_vs_limit`: pi_loader / the raw decode limit, 2 workers | higher |
| scale | `throughput.ratios.2.pi_loader_vs_lerobot`, `throughput.ratios.2.pi_loader_vs_limit` | higher |
| scale | `throughput.bytes_per_sample.read_vs_encoded_chunks`: bytes / encoded rows (exact) | lower |

The rule is the targets' rule (`benchmarks._figures.regression`): the bound is the baseline's
median moved by `--tolerance` (default 0.25, i.e. 25%) the worse way; a ratio is ok only when
the rerun's whole spread clears the bound, "regressed" when none of it does, "undecided" when
the spread straddles it (rerun with more repeats). Regressed and undecided both fail (exit 1),
naming the ratio, the median change and the spread. A ratio the baseline lacks, or holds
without a spread (a figure committed before the rule, marked `needs_rerun`), is reported and
skipped; one the new run lacks, or reports without a spread, fails (the leg that measures it
broke, or ran fewer than 3 repeats).

    python -m benchmarks.check_baselines trainer                     # rerun --quick, compare
    python -m benchmarks.check_baselines loader --tolerance 0.3
    python -m benchmarks.check_baselines trainer --current results/trainer.json   # no rerun

Exit codes: 0 within tolerance, 1 a ratio regressed (or undecided), 2 no baseline, nothing
compared (a baseline without spreads), or the benchmark failed.
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

from benchmarks._figures import MIN_REPEATS, FiguresError, Spread, regression, spread_of

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
BASELINES = HERE / "baselines"
# 25%: above the run-to-run spread of most side-by-side ratios on this shared 2-core machine
# (the trainer's not-waiting fraction moved 0.95 -> 0.93, JAX's speed-up from workers 0.89 ->
# 1.01 between two quick runs), so a real regression, not noise, trips it; the rerun's whole
# spread must clear the bound, so a noisy rerun reads "undecided", not "ok".
DEFAULT_TOLERANCE = 0.25


@dataclass(frozen=True, slots=True)
class Ratio:
    """One compared ratio: where it is in the result JSON, and which way is better."""

    path: str
    higher_is_better: bool = True
    # a count, not a timing (bytes read per sample for a seeded order): the same every run, so
    # one number is its whole spread
    exact: bool = False


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
            Ratio("throughput.bytes_per_sample.read_vs_encoded_chunks", higher_is_better=False, exact=True),
        ),
    ),
}


def lookup(results: Any, path: str) -> Any:
    """The JSON node at a dotted path of a result, or None where it is missing.

    Example:
        >>> lookup({"ratios": {"2": {"pi_loader_vs_limit": {"median": 0.8}}}}, "ratios.2.pi_loader_vs_limit")
        {'median': 0.8}
    """
    node = results
    for key in path.split("."):
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node


def _figure(node: Any, exact: bool) -> Spread | None:
    """The spread a JSON node holds; for an exact figure a plain number is its own spread."""
    if exact and isinstance(node, int | float) and not isinstance(node, bool):
        return Spread(float(node), float(node), float(node), (float(node),) * MIN_REPEATS)
    return spread_of(node)


def compare(
    benchmark: Benchmark, baseline: dict[str, Any], current: dict[str, Any], tolerance: float
) -> tuple[list[dict[str, Any]], list[str]]:
    """One row per ratio (baseline, now, change, status) and the failures as sentences.

    Example:
        >>> rows, failures = compare(BENCHMARKS["trainer"], baseline, current, 0.25)
    """
    rows, failures = [], []
    for ratio in benchmark.ratios:
        base_node, now_node = lookup(baseline, ratio.path), lookup(current, ratio.path)
        row: dict[str, Any] = {"ratio": ratio.path, "baseline": None, "now": None, "regression": None}
        try:
            base, now = _figure(base_node, ratio.exact), _figure(now_node, ratio.exact)
        except FiguresError as err:
            row["status"] = "FAIL: not a valid spread"
            failures.append(f"{ratio.path}: {err}")
            rows.append(row)
            continue
        row["baseline"], row["now"] = base, now
        if base is None:
            row["status"] = (
                "not in baseline (skipped)"
                if base_node is None
                else "baseline has no spread: rerun it (skipped)"
            )
        elif now is None:
            row["status"] = "FAIL: not measured" if now_node is None else "FAIL: no spread (< 3 repeats)"
            failures.append(
                f"{ratio.path} was not measured in this run as a median with its spread "
                f"(baseline {base.text()}; got {now_node!r})"
            )
        else:
            judged = regression(base, now, tolerance, higher_is_better=ratio.higher_is_better)
            row["regression"] = round(judged["change"], 4)
            better = "higher" if ratio.higher_is_better else "lower"
            if judged["status"] == "ok":
                row["status"] = "ok"
            else:
                row["status"] = "FAIL" if judged["status"] == "regressed" else "FAIL: undecided"
                head = (
                    f"{ratio.path} regressed by {judged['change']:.0%}"
                    if judged["status"] == "regressed"
                    else f"{ratio.path} is undecided (median {judged['change']:+.0%} worse)"
                )
                why = (
                    "its whole spread is past"
                    if judged["status"] == "regressed"
                    else "its spread straddles (rerun with more repeats)"
                )
                failures.append(
                    f"{head}: {now.text()} now vs {base.text()} in the baseline; {why} the bound "
                    f"{judged['bound']:.4g} ({better} is better; tolerance {tolerance:.0%})"
                )
        rows.append(row)
    return rows, failures


def _print(rows: list[dict[str, Any]]) -> None:
    width = max(len(r["ratio"]) for r in rows)
    print(f"{'ratio':<{width}}  {'baseline':>22}  {'now':>22}  {'change':>7}  status")
    for r in rows:
        base = "-" if r["baseline"] is None else r["baseline"].text()
        now = "-" if r["now"] is None else r["now"].text()
        reg = "-" if r["regression"] is None else f"{r['regression']:+.1%}"
        print(f"{r['ratio']:<{width}}  {base:>22}  {now:>22}  {reg:>7}  {r['status']}")


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
            f"\n{args.name}: {len(failures)} ratio(s) regressed or undecided at {args.tolerance:.0%}:",
            file=sys.stderr,
        )
        for failure in failures:
            print(f"  {failure}", file=sys.stderr)
        return 1
    if all(r["baseline"] is None for r in rows):
        # nothing was compared: that is not a pass
        print(
            f"\n{args.name}: no ratio compared: {baseline_path} holds none as a median with its spread "
            "(rerun the benchmark and commit its JSON as the baseline)",
            file=sys.stderr,
        )
        return 2
    print(f"\n{args.name}: every ratio within {args.tolerance:.0%} of {baseline_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
