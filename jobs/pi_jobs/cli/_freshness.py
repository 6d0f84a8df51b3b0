"""`pilake freshness`: how long after their last chunk was published episodes became readable."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from pi_jobs.settings import Settings


def _cmd_freshness(settings: Settings, args: argparse.Namespace) -> int:
    from pi_catalog import Catalog

    from pi_jobs.ops.freshness import parse_window, read_freshness, summarize, write_histogram

    since_s = parse_window(args.since)
    rows = read_freshness(Catalog(settings.catalog_path), since_s=since_s)
    latencies = rows.latencies_s()
    summary = summarize(latencies, missing_published=rows.missing_published)
    out = Path(args.out) if args.out else settings.home / "freshness.png"
    plotted = summary.count > 0
    if plotted:
        write_histogram(latencies, out, title=f"last {args.since}")
    if args.json:
        doc = {
            "since_s": since_s,
            "count": summary.count,
            "missing_published": summary.missing_published,
            "p50_s": summary.p50_s,
            "p95_s": summary.p95_s,
            "p99_s": summary.p99_s,
            "min_s": summary.min_s,
            "max_s": summary.max_s,
            "histogram": str(out) if plotted else None,
        }
        print(json.dumps(doc, indent=2))
    else:
        print(f"freshness (readable - last published) of episodes readable in the last {args.since}")
        print(summary.format())
        print(f"histogram: {out}" if plotted else "histogram: none (no episodes in the window)")
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register this group's commands on the `pilake` parser."""
    p = sub.add_parser(
        "freshness", help="p50/p95/p99 of (readable - last published) per episode, and a histogram PNG"
    )
    p.add_argument("--since", default="1h", help="window of readable times: 90s, 15m, 1h, 2d (default 1h)")
    p.add_argument("--out", default=None, help="histogram PNG path (default $PILAKE_HOME/freshness.png)")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    p.set_defaults(func=_cmd_freshness)
