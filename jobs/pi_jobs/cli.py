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
    ensure_topics(settings.bootstrap_servers, settings.kafka.options)
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

    config = UploaderConfig(
        bootstrap_servers=settings.bootstrap_servers,
        spool_dir=settings.home / "spool",
        client_options=settings.kafka.options,
    )
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
        robots_path=settings.robots_path,
        client_options=settings.kafka.options,
    )


def stream_config_from_args(settings: Settings, args: argparse.Namespace) -> StreamJobConfig:
    """`stream_config` with the overrides given to `pilake stream`.

    Raises:
        ValueError: a keyframe interval that does not divide the video rows' frame count.
    """
    from dataclasses import replace

    config = stream_config(settings)
    if args.incomplete_timeout_s is not None:
        config = replace(config, incomplete_timeout_s=args.incomplete_timeout_s)
    if args.keyframe_interval is not None:
        config = replace(
            config, featurize=replace(config.featurize, keyframe_interval=args.keyframe_interval)
        )
    return config


def _cmd_stream(settings: Settings, args: argparse.Namespace) -> int:
    from pi_jobs.stack import ensure_topics
    from pi_jobs.stream_job import run_stream_job

    ensure_topics(settings.bootstrap_servers, settings.kafka.options)
    config = stream_config_from_args(settings, args)
    report = run_stream_job(
        config,
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


def _cmd_audit(settings: Settings, args: argparse.Namespace) -> int:
    from pi_format import LakeLayout

    from pi_jobs.audit import audit, format_report
    from pi_jobs.stack import broker_status

    spools = [Path(p) for p in args.spool] if args.spool else [settings.home / "spool"]
    topic_config = None
    if not args.no_topic:
        if (
            broker_status(settings).running
            or settings.bootstrap_servers != f"127.0.0.1:{settings.broker_port}"
        ):
            topic_config = stream_config(settings)
        else:
            log.info("audit: the local broker is not running; the topic's offsets are not read")
    report = audit(
        LakeLayout(settings.lake_root),
        spool_dirs=spools,
        catalog_path=None if args.no_catalog else settings.catalog_path,
        topic_config=topic_config,
    )
    print(
        json.dumps(report.to_json(), indent=2)
        if args.json
        else format_report(report, lake_root=settings.lake_root)
    )
    return 0 if report.ok else 1


def _cmd_quarantine_list(settings: Settings, args: argparse.Namespace) -> int:
    from pi_format import LakeLayout

    from pi_jobs.quarantine import list_quarantine

    entries = list_quarantine(LakeLayout(settings.lake_root), include_closed=args.all)
    if args.reason:
        entries = [e for e in entries if e.reason == args.reason]
    if args.json:
        for e in entries:
            print(json.dumps({f: getattr(e, f) for f in e.__dataclass_fields__}, sort_keys=True))
        return 0
    for e in entries:
        offsets = e.kafka_offsets
        where = f"{e.kafka_partition}:{offsets[0]}" + (f"..{offsets[-1]}" if len(offsets) > 1 else "")
        print(
            f"{e.quarantine_id}  {e.status:<9} {e.reason:<20} {e.counting_key:<40} "
            f"{where:<14} {e.size_bytes:>10} B  {e.details[:80]}"
        )
    open_keys = {e.counting_key for e in entries if e.status == "open"}
    print(f"quarantine: {len(entries)} rows, {len(open_keys)} quarantined (open) episodes/messages")
    return 0


def _cmd_quarantine_show(settings: Settings, args: argparse.Namespace) -> int:
    import hashlib

    from pi_format import LakeLayout

    from pi_jobs.quarantine import dump_raw, find_entries, raw_rows

    layout = LakeLayout(settings.lake_root)
    entries = find_entries(layout, args.ident)
    for e in entries:
        print(f"quarantine_id : {e.quarantine_id}  ({e.status})")
        print(f"episode_id    : {e.episode_id}   counting key: {e.counting_key}")
        print(f"reason        : {e.reason}")
        print(f"details       : {e.details}")
        print(f"raw_pointer   : {e.raw_pointer}")
        print(f"size_bytes    : {e.size_bytes}")
        for r in raw_rows(layout, e).to_pylist():
            message = r["message"]
            digest = hashlib.sha256(message).hexdigest()[:16]
            print(
                f"  raw {r['kafka_topic']}/{r['kafka_partition']}@{r['kafka_offset']} "
                f"chunk={r['chunk_index']} {len(message)} B sha256={digest} "
                f"head={message[:24].hex()}"
            )
    if args.dump:
        count = dump_raw(layout, entries, Path(args.dump))
        print(f"quarantine: wrote {count} raw messages to {args.dump} (re-send with `pilake upload`)")
    return 0


def _cmd_quarantine_release(settings: Settings, args: argparse.Namespace) -> int:
    from pi_format import LakeLayout

    from pi_jobs.contract import load_registry
    from pi_jobs.quarantine import release_episode

    result = release_episode(
        LakeLayout(settings.lake_root),
        args.episode_id,
        catalog_path=settings.catalog_path,
        registry=load_registry(settings.robots_path),
        featurize_config=stream_config(settings).featurize,
        note=args.note,
    )
    print(
        f"quarantine: {result.episode_id} {result.outcome} as attempt {result.attempt_id}; "
        f"closed {len(result.quarantine_ids)} quarantine rows"
    )
    return 0


def _cmd_validate(settings: Settings, args: argparse.Namespace) -> int:
    from pi_jobs.validation import validate_table

    report = validate_table(
        settings.lake_root, args.table, validation_dir=settings.validation_dir, version=args.version
    )
    for outcome in report.outcomes if args.all else report.failed:
        print(outcome.describe())
    skipped = f", {report.skipped_rows} invisible rows skipped" if report.skipped_rows else ""
    verdict = "passed" if report.success else f"FAILED {len(report.failed)} of {len(report.outcomes)}"
    print(
        f"validate: {report.table}@v{report.version} ({report.rows} rows{skipped}): "
        f"suite {report.suite_name} {verdict} expectations"
    )
    if report.docs_index is not None:
        print(f"validate: Data Docs: {report.docs_index}")
    return 0 if report.success else 2


def _cmd_drift(settings: Settings, args: argparse.Namespace) -> int:
    from pi_jobs.validation import DriftConfig, check_lake_drift, write_drift_report

    config = DriftConfig(
        recent_episodes=args.recent,
        baseline_episodes=args.baseline,
        order_by=args.order_by,
        z_threshold=args.z_threshold,
        min_fraction=args.min_fraction,
    )
    report = check_lake_drift(settings.lake_root, config, version=args.version)
    for group in report.groups:
        if not group.checked:
            print(f"drift: {group.robot_type}: not checked: {group.note}")
    for finding in report.findings:
        print(f"drift: {finding.describe()}")
    html_path, _ = write_drift_report(report, settings.validation_dir / "drift")
    checked = sum(g.checked for g in report.groups)
    verdict = "no drift" if report.ok else f"{len(report.findings)} findings"
    print(f"drift: episodes@v{report.version}, {checked} robot types checked: {verdict}; report: {html_path}")
    return 0 if report.ok else 2


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
    p.add_argument(
        "--incomplete-timeout-s",
        type=float,
        default=None,
        help="quarantine an episode with no new chunk for this long (default 60)",
    )
    p.add_argument(
        "--keyframe-interval",
        type=int,
        default=None,
        help="frames between IDRs in the lake's training video, a divisor of its 10-frame rows "
        "(default 1, intra-only: fastest shuffled reads; 10, one GOP per row: 2-3x fewer video bytes)",
    )
    p.set_defaults(func=_cmd_stream)

    p = sub.add_parser("quarantine", help="list, show or release quarantined episodes")
    qsub = p.add_subparsers(dest="quarantine_command", required=True)
    q = qsub.add_parser("list", help="open quarantine rows (--all: also committed/released ones)")
    q.add_argument("--all", action="store_true", help="include rows closed by a commit or a release")
    q.add_argument("--reason", default=None, help="only this reason code")
    q.add_argument("--json", action="store_true", help="one JSON object per row")
    q.set_defaults(func=_cmd_quarantine_list)
    q = qsub.add_parser("show", help="a row (by quarantine_id or episode_id) and its raw messages")
    q.add_argument("ident", help="a quarantine_id or an episode_id")
    q.add_argument("--dump", default=None, help="write the raw messages to this .piep bundle file")
    q.set_defaults(func=_cmd_quarantine_show)
    q = qsub.add_parser("release", help="re-check an episode's raw bytes and commit it if valid")
    q.add_argument("episode_id")
    q.add_argument("--note", default="", help="why it is released (kept in quarantine_releases)")
    q.set_defaults(func=_cmd_quarantine_release)

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

    p = sub.add_parser(
        "audit", help="reconcile spools and topic with lake and catalog; non-zero if missing/duplicated"
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument(
        "--spool",
        action="append",
        default=None,
        help="a spool dir to count (repeatable; default $PILAKE_HOME/spool)",
    )
    p.add_argument("--no-topic", action="store_true", help="do not read the raw topic's offsets")
    p.add_argument("--no-catalog", action="store_true", help="do not compare with the catalog")
    p.set_defaults(func=_cmd_audit)

    p = sub.add_parser("validate", help="run a table's expectation suite; Data Docs; exit 2 on failure")
    p.add_argument("table", choices=["episodes", "steps"])
    p.add_argument("--version", type=int, default=None, help="Delta version (default: latest)")
    p.add_argument("--all", action="store_true", help="print passed expectations too")
    p.set_defaults(func=_cmd_validate)

    p = sub.add_parser("drift", help="per-episode statistics: recent vs baseline; exit 2 on drift")
    p.add_argument("--version", type=int, default=None, help="episodes table version (default: latest)")
    p.add_argument("--recent", type=int, default=20, help="recent window, episodes per robot type")
    p.add_argument("--baseline", type=int, default=200, help="baseline window before it")
    p.add_argument(
        "--order-by", default="start_time_ns", choices=["start_time_ns", "committed_at_ns", "received_at_ns"]
    )
    p.add_argument("--z-threshold", type=float, default=6.0, help="robust z beyond which an episode is off")
    p.add_argument("--min-fraction", type=float, default=0.25, help="share of the window that flags drift")
    p.set_defaults(func=_cmd_drift)

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
