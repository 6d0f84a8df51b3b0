"""`pilake export lerobot PIN OUT_DIR`: a dataset pin written as a LeRobot v3 dataset
(pi_jobs.exporting)."""

from __future__ import annotations

import argparse
from pathlib import Path

from pi_jobs.settings import Settings


def _cmd_lerobot(settings: Settings, args: argparse.Namespace) -> int:
    from pi_format import LakeLayout

    from pi_jobs.exporting import FileLimits, export_lerobot

    # a bad limit is a ValueError naming it, which `pilake` prints as its error
    limits = FileLimits(
        chunks_size=args.chunks_size,
        data_files_size_in_mb=args.data_files_size_in_mb,
        video_files_size_in_mb=args.video_files_size_in_mb,
    )
    report = export_lerobot(LakeLayout(settings.lake_root), args.pin, Path(args.out_dir), limits=limits)
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
    # lerobot's defaults (LeRobotDataset.create), written to meta/info.json
    e.add_argument("--chunks-size", type=int, default=1000, help="files per chunk directory (default 1000)")
    e.add_argument(
        "--data-files-size-in-mb",
        type=float,
        default=100.0,
        help="start a new data parquet file before one reaches this many MiB (default 100)",
    )
    e.add_argument(
        "--video-files-size-in-mb",
        type=float,
        default=200.0,
        help="start a new video file before one reaches this many MiB (default 200)",
    )
    e.set_defaults(func=_cmd_lerobot)
