"""`pilake annotate import | list`: episode annotations (pi_jobs.maintenance.annotations)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from pi_jobs.settings import Settings


def _cmd_import(settings: Settings, args: argparse.Namespace) -> int:
    from pi_format import LakeLayout

    from pi_jobs.maintenance.annotations import import_annotations

    report = import_annotations(
        LakeLayout(settings.lake_root),
        Path(args.file),
        source=args.source,
        catalog=None if args.no_catalog else settings.catalog_path,
    )
    for line in report.lines_out():
        print(line)
    return 0


def _cmd_list(settings: Settings, args: argparse.Namespace) -> int:
    from pi_format import LakeLayout

    from pi_jobs.maintenance.annotations import list_annotations

    rows = list_annotations(LakeLayout(settings.lake_root), args.episode, all_versions=args.all_versions)
    records = rows.select(["step_start", "step_end", "kind", "value", "source", "version", "attempt_id"])
    if args.json:
        print(json.dumps(records.to_pylist(), indent=2))
        return 0
    if records.num_rows == 0:
        print(f"{args.episode}: no annotations (`pilake annotate import FILE.jsonl` adds some)")
        return 0
    print(f"{args.episode}: {records.num_rows} annotations")
    for r in records.to_pylist():
        span = f"[{r['step_start']}, {r['step_end']})"
        print(f"  {span:<14} {r['kind']:<14} {r['source']}@{r['version']:<4} {r['value']}")
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register this group's commands on the `pilake` parser."""
    p = sub.add_parser("annotate", help="episode annotations: instructions, subtasks, scores, tags")
    asub = p.add_subparsers(dest="annotate_command", required=True)
    imp = asub.add_parser("import", help="import annotations from a JSON Lines file (one object per line)")
    imp.add_argument("file", help="JSONL: episode_id, kind, value[, source, version, step_start, step_end]")
    imp.add_argument("--source", default=None, help="who wrote them, for lines without a source")
    imp.add_argument("--no-catalog", action="store_true", help="write the lake only (rebuild indexes later)")
    imp.set_defaults(func=_cmd_import)
    ls = asub.add_parser("list", help="an episode's current annotations")
    ls.add_argument("episode")
    ls.add_argument("--all-versions", action="store_true", help="every version, deleted episodes too")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=_cmd_list)
