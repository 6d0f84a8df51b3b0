"""`pilake audit`: spools and topic against lake and catalog."""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from pi_jobs.settings import Settings
from pi_jobs.stream.config import stream_config

log = logging.getLogger("pi_jobs")


def _cmd_audit(settings: Settings, args: argparse.Namespace) -> int:
    from pi_format import LakeLayout

    from pi_jobs.local.stack import broker_status
    from pi_jobs.ops.audit import audit, find_spools, format_report

    # by default every spool of the installation: spool/, spool-import/ and each import's own
    # spool in it, any other spool* directory (pi_jobs.ops._spools)
    spools = [Path(p) for p in args.spool] if args.spool else find_spools(settings.home)
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


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register this group's commands on the `pilake` parser."""
    p = sub.add_parser(
        "audit", help="reconcile spools and topic with lake and catalog; non-zero if missing/duplicated"
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument(
        "--spool",
        action="append",
        default=None,
        help="a spool dir to count (repeatable; default: every spool under $PILAKE_HOME)",
    )
    p.add_argument("--no-topic", action="store_true", help="do not read the raw topic's offsets")
    p.add_argument("--no-catalog", action="store_true", help="do not compare with the catalog")
    p.set_defaults(func=_cmd_audit)
