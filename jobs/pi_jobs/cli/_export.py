"""`pilake export lerobot PIN OUT_DIR`: a dataset pin written as a LeRobot v3 dataset
(pi_jobs.exporting)."""

from __future__ import annotations

import argparse
from pathlib import Path

from pi_jobs.settings import Settings


def _cmd_lerobot(settings: Settings, args: argparse.Namespace) -> int:
    from pi_format import LakeLayout

    from pi_jobs.exporting import export_lerobot

    report = export_lerobot(LakeLayout(settings.lake_root), args.pin, Path(args.out_dir))
    for line in report.lines():
        print(line)
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register this group's commands on the `pilake` parser."""
    p = sub.add_parser("export", help="write a dataset pin in another tool's format")
    esub = p.add_subparsers(dest="export_command", required=True)
    e = esub.add_parser("lerobot", help="a pin as a LeRobot v3 dataset (parquet, mp4, meta)")
    e.add_argument("pin", help="the dataset pin's name (`pilake dataset list`)")
    e.add_argument("out_dir", help="a new or empty directory")
    e.set_defaults(func=_cmd_lerobot)
