"""`pilake validate | drift`: expectation suites and drift of per-episode statistics."""

from __future__ import annotations

import argparse

from pi_jobs.settings import Settings


def _cmd_validate(settings: Settings, args: argparse.Namespace) -> int:
    from pi_jobs.ops.validation import validate_table

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
    from pi_jobs.ops.validation import DriftConfig, check_lake_drift, write_drift_report

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


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register this group's commands on the `pilake` parser."""
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
