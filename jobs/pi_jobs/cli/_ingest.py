"""`pilake simulate | upload`: make a simulated fleet's episodes and upload them through the spool."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from pi_jobs.settings import Settings


def _cmd_simulate(settings: Settings, args: argparse.Namespace) -> int:
    from pi_ingest.simulator import SimulationConfig, write_fleet

    config = SimulationConfig(
        robots=args.robots, episodes_per_robot=args.episodes, duration_s=args.duration_s, seed=args.seed
    )
    out = Path(args.out) if args.out else settings.home / "bundles"
    out.mkdir(parents=True, exist_ok=True)
    paths = write_fleet(config, out, progress=True)
    print(f"simulate: wrote {len(paths)} episode bundles to {out}")
    if args.upload:
        return _upload(settings, paths, wait_s=args.wait_s)
    return 0


def _upload(settings: Settings, paths: Sequence[Path], *, wait_s: float | None) -> int:
    from pi_ingest.uploader import UploaderConfig, upload_paths

    config = UploaderConfig(
        bootstrap_servers=settings.bootstrap_servers,
        spool_dir=settings.home / "spool",
        ack_topic=settings.ack_topic,  # the fleet's own (kafka.fleet), the only one it may read
        client_options=settings.kafka.options,
        metrics_port=settings.uploader_metrics_port or None,  # /metrics while it uploads
    )
    report = upload_paths(list(paths), config, wait_s=wait_s, progress=True)
    print(
        f"upload: {report.submitted} episodes, {report.sent_messages} messages, "
        f"{report.sent_bytes / 1e6:.1f} MB sent; confirmed {len(report.committed)} committed, "
        f"{len(report.quarantined)} quarantined, {len(report.pending)} pending"
    )
    if report.unsent:
        print(f"upload: never reached the broker (kept in the spool): {list(report.unsent)}", file=sys.stderr)
        return 2
    return 0 if wait_s is None or not report.pending else 2


def _cmd_upload(settings: Settings, args: argparse.Namespace) -> int:
    return _upload(settings, [Path(p) for p in args.paths], wait_s=args.wait_s)


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register this group's commands on the `pilake` parser."""
    p = sub.add_parser("simulate", help="make realistic episodes of a simulated fleet")
    p.add_argument("--robots", type=int, default=2)
    p.add_argument("--episodes", type=int, default=2, help="episodes per robot")
    p.add_argument("--duration-s", type=float, default=4.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="directory for bundles (default: $PILAKE_HOME/bundles)")
    p.add_argument("--upload", action="store_true", help="upload the bundles right away")
    p.add_argument("--wait-s", type=float, default=None, help="wait this long for lake confirmations")
    p.set_defaults(func=_cmd_simulate)

    p = sub.add_parser("upload", help="upload episode bundle files or directories of them")
    p.add_argument("paths", nargs="+")
    p.add_argument("--wait-s", type=float, default=None, help="wait this long for lake confirmations")
    p.set_defaults(func=_cmd_upload)
