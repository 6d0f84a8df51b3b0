"""`pilake import hdf5 | lerobot`: outside datasets into the lake through the fleet's ingest path
(pi_jobs.importing). By default the command drives the local stack as `pilake demo` does: it
starts the broker when it is not running (and stops it after), sends the episodes, runs the
stream job until the topic is idle and waits for the lake's confirmations. With `--no-stream`
it only sends them and waits for the stream job that is already running (`pilake stream`):
never run both on one broker's topic.

All or nothing: the whole dataset is read and checked before anything is sent (a damaged file
exits 1 naming it, with nothing spooled), each import has its own spool under
`$PILAKE_HOME/spool-import/`, and rerunning an import resumes what it left pending.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from pi_jobs.settings import Settings

if TYPE_CHECKING:
    from pi_jobs.importing import ImportOptions


def _run(settings: Settings, args: argparse.Namespace, episodes: Iterator[object]) -> int:
    from pi_ingest import UploaderConfig

    from pi_jobs.importing import ImportConfig, run_import
    from pi_jobs.local.stack import broker_status, ensure_topics, start_broker, stop_broker
    from pi_jobs.stream.config import stream_config

    started = False
    if not broker_status(settings).running:
        if args.no_stream:
            print("import: the broker is not running: start the stack (`pilake up`, `pilake stream`) first")
            return 2
        print(f"import: {start_broker(settings).detail}")
        started = True
    try:
        ensure_topics(settings.bootstrap_servers, settings.kafka.options)
        config = ImportConfig(
            uploader=UploaderConfig(
                bootstrap_servers=settings.bootstrap_servers,
                # a spool of its own: the import waits for every episode in it
                spool_dir=settings.home / "spool-import",
                client_options=settings.kafka.options,
            ),
            lake_root=settings.lake_root,
            stream=None if args.no_stream else stream_config(settings),
            catalog_path=settings.catalog_path,
            confirm_timeout_s=args.wait_s,
            annotation_source=args.source,
        )
        report = run_import(episodes, config)  # type: ignore[arg-type]
    finally:
        if started:
            stop_broker(settings)
    for line in report.lines():
        print(line)
    return 0 if not report.pending else 2


def _options(settings: Settings, args: argparse.Namespace) -> ImportOptions:
    from pi_jobs.importing import ImportOptions
    from pi_jobs.stream.config import stream_config

    featurize = stream_config(settings).featurize
    return ImportOptions(
        resize=args.resize,
        target_width=featurize.video_width,
        target_height=featurize.video_height,
        max_array_bytes=int(args.max_array_mb * 2**20),
        drop_features=tuple(getattr(args, "drop_feature", None) or ()),
    )


def _cmd_hdf5(settings: Settings, args: argparse.Namespace) -> int:
    from pi_jobs.importing import Hdf5Mapping, read_hdf5

    options = _options(settings, args)
    mapping = Hdf5Mapping.from_toml(Path(args.mapping)) if args.mapping else None

    def episodes() -> Iterator[object]:
        for path in args.files:
            yield from read_hdf5(
                Path(path),
                mapping=mapping,
                fps=args.fps,
                robot_type=args.robot_type,
                task=args.task,
                robot_id=args.robot_id,
                options=options,
            )

    return _run(settings, args, episodes())


def _cmd_lerobot(settings: Settings, args: argparse.Namespace) -> int:
    from pi_jobs.importing.lerobot import read_lerobot

    episodes = read_lerobot(
        Path(args.dir),
        robot_type=args.robot_type,
        robot_id=args.robot_id,
        options=_options(settings, args),
    )
    return _run(settings, args, episodes)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--robot-type", default=None, help="robot registry type (default: the layout's)")
    p.add_argument("--robot-id", default=None, help="robot id of the episodes (default: from the file)")
    p.add_argument("--no-stream", action="store_true", help="send only; a running `pilake stream` commits")
    p.add_argument("--wait-s", type=float, default=600.0, help="how long to wait for confirmations")
    p.add_argument("--source", default="import", help="the source recorded with imported annotations")
    p.add_argument(
        "--resize",
        choices=["letterbox", "center-crop", "stretch"],
        default="letterbox",
        help="fit cameras of another aspect ratio than the lake's video: letterbox (default: black bars, "
        "nothing lost or distorted), center-crop (edges cut), stretch (shapes distorted); recorded "
        "per episode in its tags",
    )
    p.add_argument(
        "--drop-feature",
        action="append",
        default=None,
        metavar="NAME",
        help="import without this feature (LeRobot) or dataset path (HDF5, a glob), which the lake has "
        "no column for (repeatable); without it such a feature is refused",
    )
    p.add_argument(
        "--max-array-mb",
        type=float,
        default=4096.0,
        help="refuse an array (HDF5 dataset, data file, a camera's decoded episode) declared larger (MiB)",
    )


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register this group's commands on the `pilake` parser."""
    p = sub.add_parser("import", help="import outside datasets (HDF5, LeRobot v3) through the ingest path")
    isub = p.add_subparsers(dest="import_command", required=True)
    h = isub.add_parser("hdf5", help="robomimic / ALOHA (ACT) HDF5 files, or any layout with --mapping")
    h.add_argument("files", nargs="+")
    h.add_argument("--mapping", default=None, help="TOML describing another layout (pi_jobs.importing.hdf5)")
    h.add_argument("--fps", type=float, default=None, help="control rate (robomimic: 20, ALOHA: 50)")
    h.add_argument("--task", default=None, help="task text, also imported as the instruction")
    _common(h)
    h.set_defaults(func=_cmd_hdf5)
    r = isub.add_parser("lerobot", help="a LeRobot v3 dataset directory (tasks become instructions)")
    r.add_argument("dir")
    _common(r)
    r.set_defaults(func=_cmd_lerobot)
