"""`pilake train`: the reference trainer (pi_train) on a selection of the lake.

Arguments become a `pi_train.TrainConfig` here; pi_train (and torch or JAX) is imported only
when the command runs, so the rest of `pilake` never loads a framework.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from pi_jobs.cli._eval import (
    add_device_argument,
    add_eval_arguments,
    add_lake_arguments,
    eval_options,
    lake_options,
)
from pi_jobs.settings import Settings


def _image_size(text: str) -> tuple[int, int]:
    parts = text.lower().replace("x", ",").split(",")
    try:
        values = [int(p) for p in parts if p]
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"--image-size must be N or HxW, got {text!r}") from err
    if len(values) == 1:
        return values[0], values[0]
    if len(values) == 2:
        return values[0], values[1]
    raise argparse.ArgumentTypeError(f"--image-size must be N or HxW, got {text!r}")


def _mix(text: str) -> tuple[tuple[str, float], ...]:
    """`pick-v1=0.7,place-v2=0.3` -> (("pick-v1", 0.7), ("place-v2", 0.3))."""
    out = []
    for part in text.split(","):
        name, sep, weight = part.strip().partition("=")
        try:
            value = float(weight)
        except ValueError:
            value = -1.0
        if not sep or not name or not value > 0:
            raise argparse.ArgumentTypeError(f"--mix takes PIN=WEIGHT,... with weights > 0, got {part!r}")
        out.append((name, value))
    return tuple(out)


def train_config_from_args(settings: Settings, args: argparse.Namespace) -> Any:
    """The `pi_train.TrainConfig` of a parsed `pilake train` command line.

    Example:
        >>> args = build_parser().parse_args(["train", "--sql", "SELECT episode_id FROM episodes"])
        >>> train_config_from_args(Settings.from_env(), args).framework
        'torch'
    """
    from pi_train import TrainConfig

    return TrainConfig(
        **lake_options(settings, args),
        sql=args.sql,
        dataset=args.dataset,
        mix=args.mix,
        framework=args.framework,
        steps=args.steps,
        batch_size=args.batch_size,
        workers=args.workers,
        # Under PILAKE_HOME by default: state of the installation, git-ignored like the lake.
        out_dir=args.out or str(settings.home / "runs" / f"train-{args.framework}"),
        checkpoint_dir=args.checkpoint_dir,
        checkpoint_every=args.checkpoint_every,
        resume=args.resume,
        stop_after_s=args.stop_after_s,
        seed=args.seed,
        learning_rate=args.lr,
        loss=args.loss,
        cameras=tuple(args.cameras.split(",")) if args.cameras else None,
        action_horizon=args.action_horizon,
        image_size=args.image_size,
        log_every=args.log_every,
        log_batches=args.log_batches,
        device=args.device,
        **eval_options(args),
        metrics_port=args.metrics_port,
        cache_dir=args.cache_dir,
        cache_gib=args.cache_gib,
    )


def _cmd_train(settings: Settings, args: argparse.Namespace) -> int:
    from pi_train import launch, train

    config = train_config_from_args(settings, args)
    if args.nproc > 1 or args.nnodes > 1:  # this is host --node-rank (docs/training-multihost.md)
        hosts = {k: getattr(args, k) for k in ("nnodes", "node_rank", "master_addr", "master_port")}
        return int(launch(config, args.nproc, rendezvous_timeout_s=args.rendezvous_timeout, **hosts))
    result = train(config)
    if result.stopped is not None:  # SIGTERM or a deadline: checkpointed, and that is success
        print(f"pilake train: stopped by {result.stopped['reason']} at step {result.step} of {config.steps}")
        print(f"  checkpointed in {config.checkpoints}; run the same command with --resume to continue")
        return 0
    print(f"pilake train: step {result.step}, loss {result.losses[-1] if result.losses else 'n/a'}")
    print(f"  logs, timing.png and summary.json in {result.out_dir}; checkpoints in {config.checkpoints}")
    return 0


def _cmd_train_recorded(settings: Settings, args: argparse.Namespace) -> int:
    """`_cmd_train`, registered in the catalog's runs table by host 0 (pi_jobs.ops.runs)."""
    from pi_jobs.ops.runs import record_run

    if getattr(args, "node_rank", 0) != 0:
        return _cmd_train(settings, args)  # host 0 records the run
    hosts = getattr(args, "nnodes", 1)
    world = args.nproc * hosts
    config = train_config_from_args(settings, args)
    return record_run(config, lambda: _cmd_train(settings, args), world_size=world, host_count=hosts)


def _cmd_stage_or_train(settings: Settings, args: argparse.Namespace) -> int:
    """`--stage`: read the run's selection into its cache and exit (pi_train._stage); else train."""
    if not args.stage:
        return _cmd_train_recorded(settings, args)
    from pi_train._stage import stage

    config = train_config_from_args(settings, args)
    if config.workers is not None and args.nproc > 1:
        # staging runs alone on the host: the workers of all its --nproc training processes
        config = dataclasses.replace(config, workers=config.workers * args.nproc)
    report = stage(config)
    print(
        f"pilake train --stage: read {report['samples']} samples of {report['episodes']} episodes in "
        f"{report['seconds']} s into the cache {config.cache_dir or '(none: a local lake)'}"
    )
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register this group's commands on the `pilake` parser."""
    p = sub.add_parser(
        "train",
        help="train the reference policy (torch or JAX) on a selection of the lake",
        description="Train the reference policy on a snapshot of the lake. Select episodes with --sql "
        "or --dataset (a snapshot name in the catalog); with neither, every committed episode.",
    )
    which = p.add_mutually_exclusive_group()
    which.add_argument("--sql", default=None, help="ClickHouse SQL over the catalog returning episode_id")
    which.add_argument("--dataset", default=None, help="the name of a snapshot stored in the catalog")
    which.add_argument(
        "--mix",
        type=_mix,
        default=None,
        help="weighted dataset pins of the lake: PIN=WEIGHT,PIN=WEIGHT (a pi_loader.Mixture)",
    )
    p.add_argument("--framework", choices=("torch", "jax"), default="torch")
    p.add_argument("--steps", type=int, default=100, help="optimizer steps to reach")
    p.add_argument("--batch-size", type=int, default=32, help="samples per process per step")
    p.add_argument(
        "--workers",
        type=int,
        default=None,
        help="pi_loader worker processes per process (default: the host's cores less two)",
    )
    p.add_argument("--nproc", type=int, default=1, help="data-parallel processes on this host")
    p.add_argument("--nnodes", type=int, default=1, help="hosts in the run (one pilake train per host)")
    p.add_argument("--node-rank", type=int, default=0, help="this host, 0..nnodes-1 (host 0 coordinates)")
    p.add_argument("--master-addr", default="127.0.0.1", help="host 0's address, as every host reaches it")
    p.add_argument("--master-port", type=int, default=None, help="rendezvous port on host 0 (with --nnodes)")
    p.add_argument(
        "--rendezvous-timeout", type=float, default=300.0, help="seconds to wait for every host, then fail"
    )
    p.add_argument(
        "--out", default=None, help="logs, timing.png, summary.json (default .pilake/runs/train-FRAMEWORK)"
    )
    p.add_argument("--checkpoint-dir", default=None, help="default: OUT/checkpoints")
    p.add_argument(
        "--checkpoint-every", type=int, default=100, help="steps between checkpoints (0: only at the end)"
    )
    p.add_argument("--resume", action="store_true", help="continue from the latest checkpoint")
    p.add_argument(
        "--stop-after-s",
        type=float,
        default=None,
        help="finish the step, checkpoint and exit 0 after this many seconds, as on SIGTERM "
        "(also: PILAKE_TRAIN_DEADLINE, a Unix time)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--loss", choices=("l2", "l1"), default="l2")
    p.add_argument("--cameras", default=None, help="comma-separated cameras (default: all)")
    p.add_argument("--action-horizon", type=int, default=16)
    p.add_argument("--image-size", type=_image_size, default=None, help="resize frames: N or HxW")
    p.add_argument("--log-every", type=int, default=10, help="steps per timing window")
    p.add_argument("--log-batches", action="store_true", help="log each batch's digest and sample ids")
    add_device_argument(p, default="auto")
    add_eval_arguments(p)  # --eval-dataset / --eval-fraction / --eval-every / --eval-samples
    p.add_argument(
        "--metrics-port",
        type=int,
        default=0,
        help="serve live step-time metrics to Prometheus on this port (+ the local rank); 0: off",
    )
    p.add_argument(
        "--cache-dir", default=None, help="the loader's disk cache on a local disk (needed for an s3:// lake)"
    )
    p.add_argument("--cache-gib", type=float, default=100.0, help="the most the cache may hold, GiB")
    p.add_argument(
        "--stage",
        action="store_true",
        help="read the selection once into --cache-dir and exit, without training (an init step)",
    )
    add_lake_arguments(p)
    p.set_defaults(func=_cmd_stage_or_train)
