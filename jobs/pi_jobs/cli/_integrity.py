"""`pilake verify | repair`: scrub the lake's stored bytes and repair what is damaged
(pi_jobs.integrity, architecture decision 10)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pi_jobs.settings import Settings


def _verify_dir(settings: Settings) -> Path:
    return settings.home / "verify"


def _cmd_verify(settings: Settings, args: argparse.Namespace) -> int:
    from pi_format import LakeLayout

    from pi_jobs.integrity import VERIFIED_TABLES, VerifyConfig, verify_lake

    config = VerifyConfig(
        sample=args.sample,
        seed=args.seed,
        tables=tuple(args.table) if args.table else VERIFIED_TABLES,
        state_path=Path(args.state) if args.state else _verify_dir(settings) / "state.json",
        report_path=Path(args.report) if args.report else _verify_dir(settings) / "report.json",
        workers=args.workers,
    )
    print(f"verify: {settings.lake_root} (read-only); state {config.state_path}")
    bar = not args.no_progress and sys.stderr.isatty()  # a CronJob's log gets a line every 2 s instead
    report = verify_lake(LakeLayout(settings.lake_root), config, progress=bar, say=print)
    if args.json:
        print(json.dumps(report.as_dict(), indent=2))
    else:
        for line in report.lines():
            print(line)
    print(f"verify: report written to {config.report_path}")
    if args.metrics_file or args.pushgateway:
        return _export_metrics(report, args)
    return report.exit_code


def _export_metrics(report: object, args: argparse.Namespace) -> int:
    """Leave the run's figures for Prometheus; a failed export fails a clean run (exit 1) so the
    CronJob shows it, and never hides damage (exit 2 stands)."""
    import time

    from pi_jobs.integrity import VerifyReport
    from pi_jobs.integrity._metrics import (
        VerifyMetricsError,
        push_metrics,
        verify_metrics_text,
        write_metrics_file,
    )

    assert isinstance(report, VerifyReport)
    text = verify_metrics_text(report, finished_at=time.time())
    try:
        if args.metrics_file:
            write_metrics_file(Path(args.metrics_file), text)
            print(f"verify: metrics written to {args.metrics_file}")
        if args.pushgateway:
            push_metrics(args.pushgateway, text)
            print(f"verify: metrics pushed to {args.pushgateway}")
    except VerifyMetricsError as err:
        print(f"verify: {err}", file=sys.stderr)
        return report.exit_code or 1
    return report.exit_code


def _cmd_repair(settings: Settings, args: argparse.Namespace) -> int:
    from pi_format import LakeLayout

    from pi_jobs.integrity import RepairConfig, VerifyConfig, VerifyReport, repair_lake, verify_lake

    layout = LakeLayout(settings.lake_root)
    if args.report:
        report = VerifyReport.from_dict(json.loads(Path(args.report).read_text()))
        damaged = len(report.corrupt_episodes)
        print(f"repair: from the verify report {args.report} ({damaged} damaged attempts)")
    else:
        print("repair: verifying the lake first (pass --report to use a verify report)")
        report = verify_lake(layout, VerifyConfig(), say=print)
        for line in report.lines():
            print(line)
    if not report.faults:
        print("repair: nothing is damaged")
        return 0
    catalog = None if args.no_catalog else settings.catalog_path
    # progress goes to the log (one line per episode); the summary below says what was done
    result = repair_lake(layout, report, RepairConfig(catalog_path=catalog, dry_run=args.dry_run))
    for line in result.lines():
        print(line)
    return result.exit_code


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register this group's commands on the `pilake` parser."""
    p = sub.add_parser(
        "verify",
        help="scrub the lake: check every stored byte against its checksum (exit 2 when any is damaged)",
    )
    p.add_argument("--sample", type=float, default=1.0, help="fraction of files to check (default: all)")
    p.add_argument("--seed", type=int, default=0, help="which files a --sample picks (another seed, others)")
    p.add_argument("--table", action="append", help="a lake table to check (repeatable; default: all)")
    p.add_argument("--state", help="resume state file (default: $PILAKE_HOME/verify/state.json)")
    p.add_argument("--report", help="JSON report path (default: $PILAKE_HOME/verify/report.json)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--workers", type=int, default=1, help="files checked at once, one process each (default: 1)"
    )
    p.add_argument(
        "--metrics-file",
        help="write the run's figures (pilake_verify_*) to this file, Prometheus text format "
        "(node exporter's textfile collector directory, e.g. .../pilake-verify.prom)",
    )
    p.add_argument(
        "--pushgateway", help="push the run's figures to this Pushgateway, e.g. http://pushgateway:9091"
    )
    p.set_defaults(func=_cmd_verify)
    p = sub.add_parser(
        "repair",
        help="re-featurize the episodes `pilake verify` found damaged from raw, or keep them aside",
    )
    p.add_argument("--report", help="a `pilake verify` JSON report (default: verify now)")
    p.add_argument("--dry-run", action="store_true", help="say what would be done, change nothing")
    p.add_argument("--no-catalog", action="store_true", help="do not record the new attempts in the catalog")
    p.set_defaults(func=_cmd_repair)
