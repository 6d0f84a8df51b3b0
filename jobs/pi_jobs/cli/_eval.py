"""`pilake eval`: score a training checkpoint on a dataset pin; and `pilake train`'s eval flags.

pi_train (and torch or JAX) is imported only when the command runs.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from pi_jobs.settings import Settings


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(
            f"--eval-fraction must be a number strictly between 0 and 1, got {text!r} (e.g. 0.05)"
        )
    return value


def add_eval_arguments(p: argparse.ArgumentParser) -> None:
    """`pilake train`'s evaluation flags (pi_train.TrainConfig's eval_* fields)."""
    held = p.add_mutually_exclusive_group()
    held.add_argument(
        "--eval-dataset", default=None, help="a dataset pin held out for evaluation (not trained on)"
    )
    held.add_argument(
        "--eval-fraction",
        type=_fraction,
        default=None,
        help="hold out this fraction of the episodes, chosen by a salted hash of episode_id",
    )
    p.add_argument(
        "--eval-every", type=int, default=100, help="steps between evals of the held-out samples (0: none)"
    )
    p.add_argument(
        "--eval-samples", type=int, default=256, help="held-out samples scored each eval (a fixed choice)"
    )


def add_lake_arguments(p: argparse.ArgumentParser) -> None:
    """`--lake` and `--catalog`, as `pilake train` and `pilake eval` take them (read back by
    `lake_options`)."""
    p.add_argument("--lake", default=None, help="default: $PILAKE_LAKE or .pilake/lake")
    p.add_argument("--catalog", default=None, help="default: $PILAKE_CATALOG or .pilake/catalog")


def lake_options(settings: Settings, args: argparse.Namespace) -> dict[str, Any]:
    """The `lake` and `catalog` of `add_lake_arguments`' flags, the installation's where not given."""
    return {"lake": args.lake or settings.lake_root, "catalog": args.catalog or settings.catalog_path}


def add_device_argument(p: argparse.ArgumentParser, default: str) -> None:
    """`--device`: where the policy runs (pi_train's choices)."""
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default=default)


def eval_options(args: argparse.Namespace) -> dict[str, Any]:
    """The TrainConfig fields of `add_eval_arguments`' flags."""
    return {
        "eval_dataset": args.eval_dataset,
        "eval_fraction": args.eval_fraction,
        "eval_every": args.eval_every,
        "eval_samples": args.eval_samples,
    }


def _cmd_eval(settings: Settings, args: argparse.Namespace) -> int:
    from pi_train import EvalConfig, PiTrainError, evaluate_checkpoint, format_eval

    try:
        report = evaluate_checkpoint(
            EvalConfig(
                checkpoint=args.checkpoint,
                dataset=args.dataset,
                **lake_options(settings, args),
                run=args.run,
                samples=args.samples,
                batch_size=args.batch_size,
                device=args.device,
                out_dir=args.out,
                plot=not args.no_plot,
            )
        )
    except PiTrainError as err:
        print(f"pilake eval: error: {err}", file=sys.stderr)
        return 1
    print(format_eval(report))
    print(f"\npilake eval: eval.json{'' if args.no_plot else ' and eval.png'} in {report['out_dir']}")
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register `pilake eval`."""
    p = sub.add_parser(
        "eval",
        help="score a training checkpoint on a dataset pin (action L1/L2 per horizon step, robot, task)",
        description="Score a checkpoint of `pilake train` on a dataset pin: the training loss, action "
        "L1/L2 per horizon step and per robot and task; prints a table, writes eval.json and eval.png.",
    )
    p.add_argument(
        "checkpoint",
        help="a run's --out directory (its newest checkpoint), a checkpoints directory, a torch "
        "step_*.pt or an orbax step directory",
    )
    p.add_argument("--dataset", required=True, help="the dataset pin to score on (pilake dataset list)")
    p.add_argument(
        "--run", default=None, help="the run's --out (holds policy.json); default: found from CHECKPOINT"
    )
    p.add_argument(
        "--samples", type=int, default=None, help="score this many samples (a fixed choice); default all"
    )
    p.add_argument("--batch-size", type=int, default=32)
    add_device_argument(p, default="cpu")
    p.add_argument("--out", default=None, help="default: RUN/eval-DATASET-stepN")
    p.add_argument("--no-plot", action="store_true", help="skip eval.png")
    add_lake_arguments(p)
    p.set_defaults(func=_cmd_eval)
