"""`pilake quarantine list | show | release`: episodes the ingest contract rejected."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from pi_jobs.settings import Settings
from pi_jobs.stream.config import stream_config


def _cmd_quarantine_list(settings: Settings, args: argparse.Namespace) -> int:
    from pi_format import LakeLayout

    from pi_jobs.ops.quarantine import list_quarantine

    entries = list_quarantine(LakeLayout(settings.lake_root), include_closed=args.all)
    if args.reason:
        entries = [e for e in entries if e.reason == args.reason]
    if args.json:
        for e in entries:
            print(json.dumps({f: getattr(e, f) for f in e.__dataclass_fields__}, sort_keys=True))
        return 0
    for e in entries:
        offsets = e.kafka_offsets
        where = f"{e.kafka_partition}:{offsets[0]}" + (f"..{offsets[-1]}" if len(offsets) > 1 else "")
        print(
            f"{e.quarantine_id}  {e.status:<9} {e.reason:<20} {e.counting_key:<40} "
            f"{where:<14} {e.size_bytes:>10} B  {e.details[:80]}"
        )
    open_keys = {e.counting_key for e in entries if e.status == "open"}
    print(f"quarantine: {len(entries)} rows, {len(open_keys)} quarantined (open) episodes/messages")
    return 0


def _cmd_quarantine_show(settings: Settings, args: argparse.Namespace) -> int:
    import hashlib

    from pi_format import LakeLayout

    from pi_jobs.ops.quarantine import dump_raw, find_entries, raw_rows

    layout = LakeLayout(settings.lake_root)
    entries = find_entries(layout, args.ident)
    for e in entries:
        print(f"quarantine_id : {e.quarantine_id}  ({e.status})")
        print(f"episode_id    : {e.episode_id}   counting key: {e.counting_key}")
        print(f"reason        : {e.reason}")
        print(f"details       : {e.details}")
        print(f"raw_pointer   : {e.raw_pointer}")
        print(f"size_bytes    : {e.size_bytes}")
        for r in raw_rows(layout, e).to_pylist():
            message = r["message"]
            digest = hashlib.sha256(message).hexdigest()[:16]
            print(
                f"  raw {r['kafka_topic']}/{r['kafka_partition']}@{r['kafka_offset']} "
                f"chunk={r['chunk_index']} {len(message)} B sha256={digest} "
                f"head={message[:24].hex()}"
            )
    if args.dump:
        count = dump_raw(layout, entries, Path(args.dump))
        print(f"quarantine: wrote {count} raw messages to {args.dump} (re-send with `pilake upload`)")
    return 0


def _cmd_quarantine_release(settings: Settings, args: argparse.Namespace) -> int:
    from pi_format import LakeLayout

    from pi_jobs.ops.quarantine import release_episode
    from pi_jobs.stream.contract import load_registry

    result = release_episode(
        LakeLayout(settings.lake_root),
        args.episode_id,
        catalog_path=settings.catalog_path,
        registry=load_registry(settings.robots_path),
        featurize_config=stream_config(settings).featurize,
        note=args.note,
    )
    print(
        f"quarantine: {result.episode_id} {result.outcome} as attempt {result.attempt_id}; "
        f"closed {len(result.quarantine_ids)} quarantine rows"
    )
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register this group's commands on the `pilake` parser."""
    p = sub.add_parser("quarantine", help="list, show or release quarantined episodes")
    qsub = p.add_subparsers(dest="quarantine_command", required=True)
    q = qsub.add_parser("list", help="open quarantine rows (--all: also committed/released ones)")
    q.add_argument("--all", action="store_true", help="include rows closed by a commit or a release")
    q.add_argument("--reason", default=None, help="only this reason code")
    q.add_argument("--json", action="store_true", help="one JSON object per row")
    q.set_defaults(func=_cmd_quarantine_list)
    q = qsub.add_parser("show", help="a row (by quarantine_id or episode_id) and its raw messages")
    q.add_argument("ident", help="a quarantine_id or an episode_id")
    q.add_argument("--dump", default=None, help="write the raw messages to this .piep bundle file")
    q.set_defaults(func=_cmd_quarantine_show)
    q = qsub.add_parser("release", help="re-check an episode's raw bytes and commit it if valid")
    q.add_argument("episode_id")
    q.add_argument("--note", default="", help="why it is released (kept in quarantine_releases)")
    q.set_defaults(func=_cmd_quarantine_release)
