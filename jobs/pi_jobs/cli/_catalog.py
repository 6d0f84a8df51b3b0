"""`pilake sql | catalog rebuild`: the ClickHouse catalog."""

from __future__ import annotations

import argparse
import json

from pi_jobs.settings import Settings


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

    report = Catalog(settings.catalog_path).rebuild(LakeLayout(settings.lake_root))
    print(
        f"catalog: rebuilt from {settings.lake_root} (episodes version {report.episodes_version}): "
        f"{report.episodes} episodes indexed, {report.deleted_excluded} deleted excluded, "
        f"{report.superseded_rows} superseded attempts skipped, {report.seconds:.1f} s"
    )
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register this group's commands on the `pilake` parser."""
    p = sub.add_parser("sql", help="run ClickHouse SQL over the catalog and print a table")
    p.add_argument("query")
    p.add_argument("--params", default=None, help='JSON of {name:Type} parameters, e.g. \'{"r": "x"}\'')
    p.add_argument("--max-rows", type=int, default=50)
    p.set_defaults(func=_cmd_sql)

    p = sub.add_parser("catalog", help="catalog maintenance")
    csub = p.add_subparsers(dest="catalog_command", required=True)
    csub.add_parser(
        "rebuild", help="rebuild the index from the lake's visible episodes (atomic swap)"
    ).set_defaults(func=_cmd_catalog_rebuild)
