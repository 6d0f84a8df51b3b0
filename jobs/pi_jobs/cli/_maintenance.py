"""`pilake compact | gc | episodes delete`: keeping the lake healthy (pi_jobs.maintenance)."""

from __future__ import annotations

import argparse

from pi_jobs.settings import Settings


def _cmd_compact(settings: Settings, args: argparse.Namespace) -> int:
    from pi_format import LakeLayout

    from pi_jobs.maintenance import CompactConfig, compact

    config = CompactConfig(
        target_file_bytes=int(args.target_file_mb * 1024 * 1024),
        small_group_bytes=int(min(args.small_group_mb, args.target_file_mb) * 1024 * 1024),
        episodes_only=args.episodes_only,
    )
    report = compact(LakeLayout(settings.lake_root), config, progress=print)
    for line in report.lines():
        print(line)
    return 0


def _cmd_gc(settings: Settings, args: argparse.Namespace) -> int:
    from pi_format import LakeLayout

    from pi_jobs.maintenance import GcConfig, gc
    from pi_jobs.maintenance.live_runs import live_run_holds

    # what live training runs read stays (a catalog that does not answer stops gc here)
    holds = [] if args.no_run_check else live_run_holds(settings.catalog_path)
    for hold in holds:
        print(f"gc: training run {hold.run_id!r} is live: keeping its {len(hold.episode_ids)} episodes' rows")
    report = gc(
        LakeLayout(settings.lake_root),
        GcConfig(retention_hours=args.retention_hours, dry_run=args.dry_run),
        progress=print,
        live_runs=holds,
    )
    for line in report.lines():
        print(line)
    return 0


def _cmd_delete(settings: Settings, args: argparse.Namespace) -> int:
    from pi_format import LakeLayout

    from pi_jobs.maintenance.deletion import delete_episodes

    if bool(args.where) == bool(args.episode_id):
        raise ValueError("pass --where CONDITION or --episode-id ID (repeatable), one of them")
    if args.where:
        from pi_catalog import Catalog

        selection = f"SELECT episode_id FROM episodes WHERE {args.where}"
        index = Catalog(settings.catalog_path)
        try:
            ids = index.episode_ids(selection)
        finally:
            index.close()
    else:
        ids, selection = list(args.episode_id), "ids: " + ",".join(args.episode_id)
    if not ids:
        print("episodes delete: the selection is empty; nothing deleted")
        return 0
    report = delete_episodes(
        LakeLayout(settings.lake_root),
        ids,
        reason=args.reason,
        selection=selection,
        catalog=settings.catalog_path,
    )
    for line in report.lines():
        print(line)
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register this group's commands on the `pilake` parser."""
    p = sub.add_parser(
        "compact", help="merge the small files streaming leaves (safe while the stream job runs)"
    )
    p.add_argument("--target-file-mb", type=float, default=128.0, help="size of a merged file group")
    p.add_argument("--small-group-mb", type=float, default=32.0, help="file groups below this are merged")
    p.add_argument(
        "--episodes-only",
        action="store_true",
        help="merge only the small groups' episodes files (steps and video stay): fast, for a lake "
        "grown without compaction whose open is slow; a later plain `pilake compact` merges the rest",
    )
    p.set_defaults(func=_cmd_compact)

    p = sub.add_parser("gc", help="remove superseded, deleted and uncommitted rows and unneeded files")
    p.add_argument(
        "--retention-hours",
        type=float,
        default=24.0,
        help="keep files a table removed this long (running training jobs may still read them); 0: free now",
    )
    p.add_argument("--dry-run", action="store_true", help="print what would be removed, and the bytes")
    p.add_argument(
        "--no-run-check",
        action="store_true",
        help="do not ask the catalog which training runs are live (their data is then not protected)",
    )
    p.set_defaults(func=_cmd_gc)

    p = sub.add_parser("episodes", help="episode maintenance")
    esub = p.add_subparsers(dest="episodes_command", required=True)
    d = esub.add_parser("delete", help="delete episodes from every new selection; gc removes their bytes")
    d.add_argument("--where", default=None, help="ClickHouse condition over the catalog's `episodes` view")
    d.add_argument("--episode-id", action="append", default=None, help="an episode to delete (repeatable)")
    d.add_argument("--reason", required=True, help="why (kept with the deletion, e.g. 'consent withdrawn')")
    d.set_defaults(func=_cmd_delete)
