"""`pilake backfill`: re-featurize committed episodes from the lake's raw table with a named
featurizer (pi_jobs.backfill), as a new visible attempt in the same lake or into a derived lake."""

from __future__ import annotations

import argparse

from pi_jobs.settings import Settings


def _cmd_backfill(settings: Settings, args: argparse.Namespace) -> int:
    from pi_jobs.backfill import FEATURIZERS, BackfillConfig, run_backfill

    if args.list:
        for f in FEATURIZERS.values():
            print(f"{f.tag:<12} {f.description}: {f.config}")
        return 0
    if not args.featurizer:
        raise ValueError(f"--featurizer is required; registered: {sorted(FEATURIZERS)}")
    config = BackfillConfig(
        lake_root=settings.lake_root,
        catalog_path=settings.catalog_path,
        featurizer=args.featurizer,
        work_dir=settings.flink_dir / "backfill",
        where=args.where,
        into=args.into,
        parallelism=args.parallelism,
        group_commit_episodes=args.group_commit_episodes,
        run_id=args.run_id or "",
    )
    report = run_backfill(config)
    print(f"backfill: {report}")
    for failure in report.failures:
        print(f"backfill: failed: {failure}")
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register this group's commands on the `pilake` parser."""
    p = sub.add_parser(
        "backfill",
        help="re-featurize committed episodes from raw with a named featurizer (PyFlink batch job)",
    )
    p.add_argument("--featurizer", metavar="NAME", default=None, help="a registered featurizer (see --list)")
    p.add_argument("--list", action="store_true", help="list the registered featurizers and exit")
    p.add_argument(
        "--where",
        metavar="SQL",
        default=None,
        help="ClickHouse condition over the catalog's `episodes` view (default: every visible episode)",
    )
    p.add_argument(
        "--into",
        metavar="NAME",
        default=None,
        help="write into the separate lake <lake>/derived/NAME (catalog <catalog>-derived/NAME) "
        "instead of superseding the visible attempts in the same lake",
    )
    p.add_argument("--parallelism", type=int, default=1, help="parallel subtasks, each a lake writer")
    p.add_argument("--group-commit-episodes", type=int, default=16, help="episodes per group commit")
    p.add_argument("--run-id", default=None, help="the run's id (default: <featurizer>-<time>-<random>)")
    p.set_defaults(func=_cmd_backfill)
