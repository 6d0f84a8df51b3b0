"""What the trainer benchmarks' legs share (`run` and `scaling`): a fresh run folder, the
reference policy's config, one pi_train process tree in a clean environment and the figures of
its `summary.json`.

    run = fresh_run(out / "legs" / "torch-w0-r0")
    (run / "config.json").write_text(leg_config(lake, run, "torch", steps=12, workers=0).to_json())
    wall = run_leg([sys.executable, "-m", "pi_train", str(run / "config.json")], what="torch / 0 workers")
    figures = leg_figures(run, samples_per_step=32, wall_s=wall)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks._figures import MIN_REPEATS
from benchmarks.loader._data import DataConfig, build_lake

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
RESULTS = HERE / "results"
MODES: dict[str, dict[str, Any]] = {
    # episodes of 4 s at 15 Hz: 60 samples each; 6 episodes (360 samples) hold 11 batches of 32
    "quick": {"episodes": 6, "duration_s": 4.0, "steps": 12},
    "full": {"episodes": 12, "duration_s": 4.0, "steps": 40},
}
BATCH = 32  # the loader benchmark's batch, and pi_train's default
HORIZON = 16
# the launcher's variables: a leg is its own run, never a rank of the caller's
_LAUNCH_VARS = ("RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def fresh_run(run: Path) -> Path:
    """`run`, emptied of an earlier leg's files and made."""
    if run.exists():
        shutil.rmtree(run)
    run.mkdir(parents=True)
    return run


def leg_config(lake: Path, run: Path, framework: str, steps: int, **fields: Any) -> Any:
    """The reference policy's `pi_train.TrainConfig` of a leg: batch 32, a 16-step action chunk,
    one compute thread, one checkpoint after the last step; `fields` add to or override it."""
    from pi_train import TrainConfig

    options: dict[str, Any] = {
        "batch_size": BATCH,
        "action_horizon": HORIZON,
        "threads": 1,
        "checkpoint_every": 0,  # one checkpoint, after the last step (left out of the step time)
        "log_every": max(steps // 4, 1),
        **fields,
    }
    return TrainConfig(
        lake=str(lake),
        framework=framework,  # type: ignore[arg-type]
        steps=steps,
        out_dir=str(run),
        **options,
    )


def run_leg(argv: list[str], what: str) -> float:
    """Run one leg's process tree to its end, in the checkout's environment without the caller's
    launcher variables; its wall seconds. Raises RuntimeError with the output's tail if it fails."""
    # the checkout first, then the caller's path (a GPU host's packages carried on PYTHONPATH)
    path_ = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", PYTHONPATH=path_)
    for name in _LAUNCH_VARS:
        env.pop(name, None)
    start = time.monotonic()
    done = subprocess.run(argv, env=env, capture_output=True, text=True)
    wall = time.monotonic() - start
    if done.returncode != 0:
        raise RuntimeError(f"leg {what} failed:\n{(done.stdout + done.stderr)[-3000:]}")
    return wall


def leg_figures(run: Path, samples_per_step: int, wall_s: float) -> dict[str, Any]:
    """The figures of a finished leg's `summary.json` (rank 0's): samples/s, data-wait fraction,
    the step-time decomposition; the final checkpoint is the run's, not the step's, and is left
    out of the step time."""
    summary = json.loads((run / "summary.json").read_text())
    ms = summary["ms_per_step"]
    step_ms = ms["total"] - ms["checkpoint"]
    return {
        "steps_measured": summary["steps"],
        "samples_per_s": round(samples_per_step / (step_ms / 1e3), 2),
        "data_wait_fraction": round(ms["data_wait"] / step_ms, 4),
        "ms_per_step": ms,
        "warmup_ms": summary["warmup_ms"],
        "verdict": summary["verdict"],
        "library": summary.get("library"),
        "wall_s": round(wall_s, 1),
    }


def runs_of(runs: list[dict[str, Any]], framework: str, key: str, value: int) -> list[dict[str, Any]]:
    """The runs of one leg (`framework`, `key` = `value`) in repeat order, so that repeat i pairs
    with repeat i of another leg."""
    mine = [r for r in runs if (r["framework"], r[key]) == (framework, value)]
    return sorted(mine, key=lambda r: int(r["repeat"]))


def leg_parser(doc: str, quick: str, steps: str) -> argparse.ArgumentParser:
    """A parser described by `doc`'s first paragraph with the flags both benchmarks take:
    --quick (help `quick`), --out, --steps (help `steps`) and --repeats (checked by
    `parse_leg_arguments`)."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help=quick)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--steps", type=int, default=None, help=steps)
    parser.add_argument(
        "--repeats", type=int, default=MIN_REPEATS, help=f"runs of every leg, interleaved (>= {MIN_REPEATS})"
    )
    return parser


def parse_leg_arguments(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """`parser`'s arguments, --repeats refused below `MIN_REPEATS` (a median with its spread)."""
    args = parser.parse_args(argv)
    if args.repeats < MIN_REPEATS:
        parser.error(f"--repeats must be >= {MIN_REPEATS} (a median with its spread), got {args.repeats}")
    return args


def mode_data(quick: bool) -> tuple[str, dict[str, Any], DataConfig]:
    """The mode's name, its settings (`MODES`) and the lake's configuration."""
    mode = "quick" if quick else "full"
    settings = MODES[mode]
    data = DataConfig(episodes=settings["episodes"], duration_s=settings["duration_s"], rate_hz=15.0)
    return mode, settings, data


def mode_lake(data: DataConfig) -> Path:
    """The lake of `data`, built once: cached beside the default results (git-ignored), whatever
    --out is."""
    return build_lake(data, RESULTS / "data" / data.key)


def data_json(data: DataConfig) -> dict[str, Any]:
    """The results' description of the lake."""
    return {
        "episodes": data.episodes,
        "samples": data.episodes * int(data.duration_s * data.rate_hz),
        "cameras": 3,
        "frame": f"{data.size_px}x{data.size_px}x3 uint8",
    }


def write_results(
    results: dict[str, Any],
    out: Path,
    name: str,
    plot: Callable[[dict[str, Any], Path], None],
    print_table: Callable[[dict[str, Any]], None],
) -> None:
    """Write OUT/NAME.json and OUT/NAME.png (by `plot`), print the table and what was written."""
    (out / f"{name}.json").write_text(json.dumps(results, indent=2))
    plot(results, out / f"{name}.png")
    print_table(results)
    print(f"wrote {out / f'{name}.json'} and {out / f'{name}.png'}")


def save_figure(fig: Any, path: Path) -> None:
    """Lay out `fig`, write it to `path` and close it."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
