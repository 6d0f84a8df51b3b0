"""`pilake ui` (the lake browser, pi_jobs.ui) and `pilake view EPISODE --rerun OUT.rrd`."""

from __future__ import annotations

import argparse
from pathlib import Path

from pi_jobs.settings import Settings


def _cmd_ui(settings: Settings, args: argparse.Namespace) -> int:
    from pi_jobs.ui import UiConfig, serve

    config = UiConfig(
        lake_root=settings.lake_root,
        catalog=settings.catalog_path,
        cache_dir=Path(args.cache_dir) if args.cache_dir else settings.run_dir / "ui-cache",
        host=args.host,
        port=args.port,
        token=args.token,
        log_dirs=(settings.log_dir / "events",),
        row_cap=args.row_cap,
        query_timeout_s=args.query_timeout_s,
        query_memory_bytes=args.query_memory_mb * 1024**2,
        max_running_queries=args.max_running_queries,
        robots=settings.robots_path or None,
    )
    serve(config)
    return 0


def _cmd_view(settings: Settings, args: argparse.Namespace) -> int:
    from pi_format import LakeLayout

    from pi_jobs.ui import write_rerun

    summary = write_rerun(LakeLayout(settings.lake_root), args.episode_id, Path(args.rerun))
    cams = ", ".join(f"{c} {n} frames" for c, n in summary.frames.items())
    print(
        f"view: {summary.episode_id} (attempt {summary.attempt_id}): {summary.steps} steps, {cams} "
        f"-> {summary.path}; open it with `rerun {summary.path}`"
    )
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register this group's commands on the `pilake` parser."""
    p = sub.add_parser(
        "ui",
        help="browse the lake: overview, episode list, SQL, episodes with video and plots, dataset "
        "statistics, quarantine, pins",
    )
    p.add_argument("--port", type=int, default=8765)
    p.add_argument(
        "--host", default="127.0.0.1", help="address to bind (another than loopback needs --token)"
    )
    p.add_argument("--token", default=None, help="required on every request (16+ characters)")
    p.add_argument("--cache-dir", default=None, help="remuxed videos (default $PILAKE_HOME/run/ui-cache)")
    p.add_argument("--row-cap", type=int, default=10_000, help="most rows a query shows")
    p.add_argument("--query-timeout-s", type=float, default=10.0, help="a query's time limit")
    p.add_argument("--query-memory-mb", type=int, default=512, help="a query's memory limit (MiB)")
    p.add_argument(
        "--max-running-queries", type=int, default=2, help="users' queries run at once (4 more wait)"
    )
    p.set_defaults(func=_cmd_ui)
    p = sub.add_parser("view", help="write one episode as a Rerun recording (cameras, state, action)")
    p.add_argument("episode_id")
    p.add_argument("--rerun", required=True, metavar="OUT.rrd", help="the recording file to write")
    p.set_defaults(func=_cmd_view)
