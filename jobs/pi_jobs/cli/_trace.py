"""`pilake trace EPISODE_ID`: the episode's history from uploader through job to loader."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from pi_jobs.settings import Settings


def _cmd_trace(settings: Settings, args: argparse.Namespace) -> int:
    from pi_catalog import Catalog
    from pi_format import LakeLayout

    from pi_jobs.ops.trace import trace_episode

    log_dirs = [Path(p) for p in args.logs] if args.logs else [settings.log_dir / "events"]
    events = trace_episode(
        args.episode_id,
        layout=LakeLayout(settings.lake_root),
        catalog=None if args.no_catalog else Catalog(settings.catalog_path),
        log_dirs=log_dirs,
    )
    if args.json:
        for e in events:
            doc = {"ts_ns": e.ts_ns, "source": e.source, "event": e.event, "attempt_id": e.attempt_id}
            print(json.dumps({**doc, **e.details}, default=str))
    else:
        print(f"episode {args.episode_id}: {len(events)} events (logs in {', '.join(map(str, log_dirs))})")
        for e in events:
            print(e.line())
    if not events:
        print(f"nothing known about {args.episode_id!r}: no log line, lake row or catalog row names it")
        return 1
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register this group's commands on the `pilake` parser."""
    p = sub.add_parser("trace", help="one episode's history: uploader, job, lake, catalog, loader")
    p.add_argument("episode_id")
    p.add_argument(
        "--logs",
        action="append",
        default=None,
        help="a directory of JSON event logs (repeatable; default $PILAKE_HOME/logs/events)",
    )
    p.add_argument("--no-catalog", action="store_true", help="do not read the catalog")
    p.add_argument("--json", action="store_true", help="one JSON object per event")
    p.set_defaults(func=_cmd_trace)
