"""`pilake`: the command line of pi-lake. Arguments are parsed into typed options here, at the
edge; every command calls the package APIs and imports its heavy dependencies lazily, so
`pilake sql` on a training host does not load PyFlink.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from pi_jobs.errors import PiJobsError
from pi_jobs.settings import Settings

if TYPE_CHECKING:
    from pi_jobs.stream_job import StreamJobConfig

log = logging.getLogger("pi_jobs")


def _cmd_up(settings: Settings, args: argparse.Namespace) -> int:
    from pi_jobs.stack import ensure_topics, start_broker

    status = start_broker(settings)
    ensure_topics(settings.bootstrap_servers)
    print(f"up: {status.detail}; topics ready; state in {settings.home}")
    return 0


def _cmd_down(settings: Settings, args: argparse.Namespace) -> int:
    from pi_jobs.stack import stop_broker

    print("down: broker stopped" if stop_broker(settings) else "down: broker was not running")
    return 0


def _cmd_status(settings: Settings, args: argparse.Namespace) -> int:
    from pi_jobs.stack import broker_status, java_version

    status = broker_status(settings)
    print(f"broker : {status.detail}")
    try:
        print(f"java   : {java_version()}")
    except PiJobsError as err:
        print(f"java   : MISSING - {err}")
    print(f"lake   : {settings.lake_root}")
    print(f"catalog: {settings.catalog_path}")
    return 0 if status.running else 1


def _cmd_setup(settings: Settings, args: argparse.Namespace) -> int:
    from pi_jobs.connector_jars import ensure_connector_jars
    from pi_jobs.stack import broker_binary, java_version

    print(f"java            : {java_version()}")
    print(f"broker binary   : {broker_binary()}")
    for jar in ensure_connector_jars(settings.jar_dir):
        print(f"connector jar   : {jar}")
    return 0


def _cmd_simulate(settings: Settings, args: argparse.Namespace) -> int:
    from pi_ingest.simulator import SimulationConfig, write_fleet

    config = SimulationConfig(
        robots=args.robots, episodes_per_robot=args.episodes, duration_s=args.duration_s, seed=args.seed
    )
    out = Path(args.out) if args.out else settings.home / "bundles"
    out.mkdir(parents=True, exist_ok=True)
    paths = write_fleet(config, out, progress=True)
    print(f"simulate: wrote {len(paths)} episode bundles to {out}")
    if args.upload:
        return _upload(settings, paths, wait_s=args.wait_s)
    return 0


def _upload(settings: Settings, paths: Sequence[Path], *, wait_s: float | None) -> int:
    from pi_ingest.uploader import UploaderConfig, upload_paths

    config = UploaderConfig(bootstrap_servers=settings.bootstrap_servers, spool_dir=settings.home / "spool")
    report = upload_paths(list(paths), config, wait_s=wait_s, progress=True)
    print(
        f"upload: {report.submitted} episodes, {report.sent_messages} messages, "
        f"{report.sent_bytes / 1e6:.1f} MB sent; confirmed {len(report.committed)} committed, "
        f"{len(report.quarantined)} quarantined, {len(report.pending)} pending"
    )
    if report.unsent:
        print(f"upload: never reached the broker (kept in the spool): {list(report.unsent)}", file=sys.stderr)
        return 2
    return 0 if wait_s is None or not report.pending else 2


def _cmd_upload(settings: Settings, args: argparse.Namespace) -> int:
    return _upload(settings, [Path(p) for p in args.paths], wait_s=args.wait_s)


def stream_config(settings: Settings) -> StreamJobConfig:
    """The stream job's configuration for an installation."""
    from pi_jobs.stream_job import StreamJobConfig

    return StreamJobConfig(
        bootstrap_servers=settings.bootstrap_servers,
        lake_root=settings.lake_root,
        catalog_path=settings.catalog_path,
        work_dir=settings.flink_dir,
        jar_dir=settings.jar_dir,
    )


def _cmd_stream(settings: Settings, args: argparse.Namespace) -> int:
    from pi_jobs.stack import ensure_topics
    from pi_jobs.stream_job import run_stream_job

    ensure_topics(settings.bootstrap_servers)
    report = run_stream_job(
        stream_config(settings),
        until_idle=args.until_idle,
        idle_timeout_s=args.idle_timeout_s,
        max_runtime_s=args.max_runtime_s,
    )
    print(f"stream: {report}")
    return 0


def _cmd_sql(settings: Settings, args: argparse.Namespace) -> int:
    from pi_catalog import Catalog, format_table

    catalog = Catalog(settings.catalog_path)
    catalog.ensure_schema()
    params = json.loads(args.params) if args.params else None
    table = catalog.query_arrow(args.query, params)
    print(format_table(table, max_rows=args.max_rows))
    return 0


def _cmd_catalog_rebuild(settings: Settings, args: argparse.Namespace) -> int:
    from pi_catalog import Catalog
    from pi_format import LakeLayout

    rows = Catalog(settings.catalog_path).rebuild_from_lake(LakeLayout(settings.lake_root))
    print(f"catalog: rebuilt from {settings.lake_root}: {rows} episodes")
    return 0


def _cmd_demo(settings: Settings, args: argparse.Namespace) -> int:
    from pi_jobs.demo import DemoConfig, run_demo

    config = DemoConfig(
        robots=args.robots,
        episodes_per_robot=args.episodes,
        duration_s=args.duration_s,
        out_dir=Path(args.out),
        seed=args.seed,
    )
    run_demo(settings, config)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pilake",
        description="pi-lake: robots -> Kafka -> PyFlink -> Delta + ClickHouse -> pi_loader",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("up", help="start the local broker and create topics").set_defaults(func=_cmd_up)
    sub.add_parser("down", help="stop the local broker").set_defaults(func=_cmd_down)
    sub.add_parser("status", help="health of the local stack").set_defaults(func=_cmd_status)
    sub.add_parser("setup", help="check Java, the broker binary, fetch connector jars").set_defaults(
        func=_cmd_setup
    )

    p = sub.add_parser("simulate", help="make realistic episodes of a simulated fleet")
    p.add_argument("--robots", type=int, default=2)
    p.add_argument("--episodes", type=int, default=2, help="episodes per robot")
    p.add_argument("--duration-s", type=float, default=4.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="directory for bundles (default: $PILAKE_HOME/bundles)")
    p.add_argument("--upload", action="store_true", help="upload the bundles right away")
    p.add_argument("--wait-s", type=float, default=None, help="wait this long for lake confirmations")
    p.set_defaults(func=_cmd_simulate)

    p = sub.add_parser("upload", help="upload episode bundle files or directories of them")
    p.add_argument("paths", nargs="+")
    p.add_argument("--wait-s", type=float, default=None, help="wait this long for lake confirmations")
    p.set_defaults(func=_cmd_upload)

    p = sub.add_parser("stream", help="run the PyFlink stream job")
    p.add_argument("--until-idle", action="store_true", help="stop once the topic is drained")
    p.add_argument("--idle-timeout-s", type=float, default=5.0)
    p.add_argument("--max-runtime-s", type=float, default=None)
    p.set_defaults(func=_cmd_stream)

    p = sub.add_parser("sql", help="run ClickHouse SQL over the catalog and print a table")
    p.add_argument("query")
    p.add_argument("--params", default=None, help='JSON of {name:Type} parameters, e.g. \'{"r": "x"}\'')
    p.add_argument("--max-rows", type=int, default=50)
    p.set_defaults(func=_cmd_sql)

    p = sub.add_parser("catalog", help="catalog maintenance")
    csub = p.add_subparsers(dest="catalog_command", required=True)
    csub.add_parser("rebuild", help="rebuild the index from the Delta tables").set_defaults(
        func=_cmd_catalog_rebuild
    )

    p = sub.add_parser("demo", help="simulate, upload, stream, query, load: the whole path")
    p.add_argument("--robots", type=int, default=3)
    p.add_argument("--episodes", type=int, default=2, help="episodes per robot")
    p.add_argument("--duration-s", type=float, default=4.0)
    p.add_argument("--seed", type=int, default=None, help="default: a fresh seed each run")
    p.add_argument("--out", default="demo-output", help="where the PNG and summary JSON go")
    p.set_defaults(func=_cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `pilake` command."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    try:
        settings = Settings.from_env()
        return int(args.func(settings, args))
    except (PiJobsError, ValueError, OSError) as err:
        print(f"pilake {args.command}: error: {err}", file=sys.stderr)
        return 1
    except Exception as err:
        # Other packages' errors (catalog, ingest, format) are already readable; no traceback
        # for a user mistake, but keep the type so a bug is recognisable.
        print(f"pilake {args.command}: {type(err).__name__}: {err}", file=sys.stderr)
        if args.verbose:
            raise
        return 1


if __name__ == "__main__":
    sys.exit(main())
