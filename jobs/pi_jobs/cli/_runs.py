"""`pilake runs`: the training runs the catalog knows, and the pins each trained on.

`pilake runs --rebuild OUT [OUT ...]` records runs again from their out dirs (lineage.json,
run.json): the catalog's runs table is derived data (pi_jobs.ops.runs).
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from pi_jobs.settings import Settings


def _when(ns: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ns / 1e9)) if ns else "-"


def run_dicts(runs: list[Any], now_ns: int) -> list[dict[str, Any]]:
    """Runs (pi_catalog.TrainingRun) as JSON-ready dicts; a running run whose heartbeat is older
    than pi_catalog.LIVE_WINDOW_S is "lost" (its host died without saying so)."""
    out = []
    for run in runs:
        status = run.status
        if status == "running" and not run.is_live(now_ns):
            status = "lost"
        out.append(
            {
                "run_id": run.run_id,
                "status": status,
                "started_at": _when(run.started_at_ns),
                "finished_at": _when(run.finished_at_ns),
                "heartbeat_at": _when(run.heartbeat_at_ns),
                "heartbeat_age_s": round((now_ns - run.heartbeat_at_ns) / 1e9, 1),
                "out_dir": run.out_dir,
                "pins": run.pin_list(),
                "code_version": run.code_version,
                "git_commit": run.git_commit,
                "host_count": run.host_count,
                "world_size": run.world_size,
                "framework": run.framework,
            }
        )
    return out


def pin_label(pin: dict[str, Any]) -> str:
    """`name@hash12` (or `sql@fingerprint` for a selection by SQL) and the episodes it pins."""
    name = pin.get("name") or "sql"
    ident = (pin.get("content_hash") or pin.get("fingerprint") or "?")[:12]
    return f"{name}@{ident} ({pin.get('episodes', '?')} ep)"


def print_runs(rows: list[dict[str, Any]]) -> None:
    """The runs as an aligned text table."""
    import pyarrow as pa
    from pi_catalog import format_table

    table = pa.table(
        {
            "run_id": [r["run_id"] for r in rows],
            "status": [r["status"] for r in rows],
            "started (UTC)": [r["started_at"] for r in rows],
            "ended/heartbeat": [
                r["finished_at"] if r["finished_at"] != "-" else r["heartbeat_at"] for r in rows
            ],
            "datasets": [", ".join(pin_label(p) for p in r["pins"]) or "-" for r in rows],
            "code": [f"{r['code_version']} {r['git_commit'][:10]}" for r in rows],
            "hosts": [r["host_count"] for r in rows],
            "out_dir": [r["out_dir"] for r in rows],
        }
    )
    print(format_table(table, max_rows=1000, max_width=60))


def _cmd_runs(settings: Settings, args: argparse.Namespace) -> int:
    from pi_catalog import Catalog, training_runs

    catalog = Catalog(args.catalog or settings.catalog_path)
    if args.rebuild:
        from pi_jobs.ops.runs import rebuild_runs

        recorded = rebuild_runs(catalog, list(args.rebuild))
        for run in recorded:
            print(f"runs: recorded {run.run_id} ({run.status}) from {run.out_dir}")
        return 0
    rows = run_dicts(training_runs(catalog, pin=args.pin), time.time_ns())
    if args.json:
        print(json.dumps(rows, indent=2, ensure_ascii=False))
    elif not rows:
        print(
            "no training runs recorded (`pilake train` records its run, `pilake runs --rebuild OUT` old ones)"
        )
    else:
        print_runs(rows)
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register this group's commands on the `pilake` parser."""
    p = sub.add_parser(
        "runs",
        help="training runs and the dataset pins they trained on (the catalog's runs table)",
        description="List the training runs `pilake train` recorded: status (running, finished, "
        "failed, preempted; lost = no heartbeat for 10 minutes), pins with content hash, code "
        "version, hosts and out dir.",
    )
    p.add_argument("--json", action="store_true")
    p.add_argument("--pin", default=None, help="only runs that read this dataset pin")
    p.add_argument(
        "--rebuild",
        nargs="+",
        metavar="OUT",
        default=None,
        help="record these runs' out dirs (lineage.json, run.json) in the catalog again",
    )
    p.add_argument("--catalog", default=None, help="default: $PILAKE_CATALOG or .pilake/catalog")
    p.set_defaults(func=_cmd_runs)
