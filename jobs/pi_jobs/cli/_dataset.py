"""`pilake dataset create | list | show | delete | copy | stage`: dataset pins
(pi_jobs.maintenance.datasets) and moving them (pi_jobs.datasets)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from pi_jobs.settings import Settings


def _cmd_create(settings: Settings, args: argparse.Namespace) -> int:
    from pi_format import LakeLayout

    from pi_jobs.maintenance.datasets import create_dataset

    pin = create_dataset(
        LakeLayout(settings.lake_root),
        args.name,
        sql=args.sql,
        episode_ids=args.episode_id or None,
        catalog=settings.catalog_path if args.sql else None,
    )
    print(
        f"dataset {pin.name}: {len(pin.episode_ids)} episodes pinned (content hash {pin.content_hash[:16]}, "
        f"taken at versions {dict(pin.table_versions)})"
    )
    print(f"read it with Dataset(lake, snapshot={pin.name!r}, ...) or `pilake train --dataset {pin.name}`")
    return 0


def _cmd_list(settings: Settings, args: argparse.Namespace) -> int:
    from pi_format import LakeLayout
    from pi_format.lake import PinStore

    pins = PinStore(LakeLayout(settings.lake_root)).summaries()
    if args.json:
        print(
            json.dumps(
                [
                    {
                        "name": p.name,
                        "episodes": p.episode_count,
                        "content_hash": p.content_hash,
                        "sql": p.sql,
                        "created_at_ns": p.created_at_ns,
                    }
                    for p in pins
                ],
                indent=2,
            )
        )
        return 0
    if not pins:
        print("no dataset pins (pilake dataset create NAME --sql ...)")
    for p in pins:
        created = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(p.created_at_ns / 1e9))
        print(
            f"{p.name:<24} {p.episode_count:>8} episodes  {p.content_hash[:16]}  {created} UTC  {p.sql or ''}"
        )
    return 0


def _cmd_show(settings: Settings, args: argparse.Namespace) -> int:
    from pi_format import LakeLayout

    from pi_jobs.maintenance.datasets import check_dataset

    check = check_dataset(LakeLayout(settings.lake_root), args.name)
    pin = check.pin
    info: dict[str, Any] = {
        "name": pin.name,
        "sql": pin.sql,
        "episodes": len(pin.episode_ids),
        "content_hash": pin.content_hash,
        "table_versions": dict(pin.table_versions),
        "created_at_ns": pin.created_at_ns,
        "rows_present": check.rows_present,
        "intact": check.intact,
        # pinned attempts `pilake repair` found damaged (and what it did about them)
        "damaged": [dict(d) for d in check.damaged],
        "first_episodes": [list(p) for p in list(zip(pin.episode_ids, pin.attempt_ids, strict=True))[:5]],
    }
    info["runs"] = _runs_of(settings, pin.name, pin.content_hash)  # None: the catalog did not answer
    if args.json:
        print(json.dumps(info, indent=2, ensure_ascii=False))
    else:
        for key, value in info.items():
            if key in ("damaged", "runs"):
                value = "unknown" if value is None else len(value)
            print(f"{key:<16} {value}")
        for d in check.damaged:
            print(f"  damaged {d['episode_id']} attempt {d['attempt_id']}: {d['details']}")
        for r in info["runs"] or []:
            other = "" if r["same_content"] else "  (a pin of this name with other content)"
            print(f"  run {r['run_id']} {r['status']} started {r['started_at']} UTC  {r['out_dir']}{other}")
    return 0 if check.intact else 2


def _runs_of(settings: Settings, name: str, content_hash: str) -> list[dict[str, Any]] | None:
    """The runs that trained on pin `name` (pi_catalog training_runs), or None with a warning on
    stderr when the catalog cannot be read (lineage is derived data: the pin is shown anyway)."""
    from pi_catalog import Catalog, training_runs

    from pi_jobs.cli._runs import run_dicts

    try:
        runs = training_runs(Catalog(settings.catalog_path), pin=name)
    except Exception as err:
        print(f"dataset show: runs unknown, the catalog did not answer ({err})", file=sys.stderr)
        return None
    rows = run_dicts(runs, time.time_ns())
    for run, row in zip(runs, rows, strict=True):
        hashes = [h for n, h in zip(run.pin_names, run.content_hashes, strict=True) if n == name]
        row["same_content"] = content_hash in hashes
    return rows


def _cmd_delete(settings: Settings, args: argparse.Namespace) -> int:
    from pi_format import LakeLayout

    from pi_jobs.maintenance.datasets import delete_dataset

    pin = delete_dataset(LakeLayout(settings.lake_root), args.name)
    print(
        f"dataset {pin.name}: deleted ({len(pin.episode_ids)} episodes); "
        "`pilake gc` reclaims what only it held"
    )
    return 0


def _cmd_copy(settings: Settings, args: argparse.Namespace) -> int:
    from pi_jobs.datasets import CopyOptions, CopyReport, copy_dataset

    options = CopyOptions(
        workers=args.workers, part_mib=args.part_mib, readback=args.readback, digest=args.digest
    )
    if args.flink or args.cluster:  # a PyFlink batch job (pi_jobs.datasets._flink_copy)
        from pi_jobs.datasets._flink_copy import FlinkCopyOptions, copy_dataset_flink

        where = settings.flink_dir / "copy"
        flink = FlinkCopyOptions(args.parallelism, cluster=args.cluster or "", work_dir=where)
        report: CopyReport = copy_dataset_flink(
            settings.lake_root, args.name, args.dest, options=options, flink=flink,
            dest_catalog=args.dest_catalog, show_progress=not args.quiet,
        )  # fmt: skip
    else:
        report = copy_dataset(
            settings.lake_root,
            args.name,
            args.dest,
            options=options,
            dest_catalog=args.dest_catalog,
            show_progress=not args.quiet,
        )
    if args.json:
        print(json.dumps(report.as_dict(), indent=2))
        return 0
    rate = report.bytes_sent / report.seconds / 2**20 if report.seconds else 0.0
    print(
        f"dataset {report.pin}: {report.episodes} episodes copied to {report.dest} (content hash "
        f"{report.content_hash[:16]}): {report.files_sent} of {report.files} files sent "
        f"({report.bytes_sent / 2**20:.1f} MiB, {rate:.1f} MiB/s), {report.files_already_there} already "
        f"there, rows committed {report.rows_committed}, {report.seconds:.1f} s"
    )
    print(f"read it there with Dataset({report.dest!r}, snapshot={report.pin!r})")
    return 0


def _cmd_stage(settings: Settings, args: argparse.Namespace) -> int:
    from pi_jobs.datasets import StageOptions, stage_dataset

    lake = settings.lake_root
    if "://" not in lake or lake.startswith("file://"):
        print(f"dataset stage: {lake} is a local lake; the loader reads it in place, nothing to stage")
        return 0
    report = stage_dataset(
        lake,
        args.name,
        args.cache,
        options=StageOptions(cache_gib=args.cache_gib, workers=args.workers),
        catalog=settings.catalog_path or None,
        show_progress=not args.quiet,
    )
    print(
        f"dataset {args.name}: staged {report['samples']} samples of {report['episodes']} episodes into "
        f"{report['cache_dir']} in {report['seconds']:.1f} s; train with --cache-dir {report['cache_dir']}"
    )
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register this group's commands on the `pilake` parser."""
    p = sub.add_parser("dataset", help="dataset pins: the exact rows a named dataset reads, kept by GC")
    dsub = p.add_subparsers(dest="dataset_command", required=True)
    c = dsub.add_parser("create", help="pin the visible attempts of a selection under a name")
    c.add_argument("name")
    c.add_argument("--sql", default=None, help="ClickHouse SQL over the catalog returning episode_id")
    c.add_argument("--episode-id", action="append", default=None, help="an episode to pin (repeatable)")
    c.set_defaults(func=_cmd_create)
    c = dsub.add_parser("list", help="the live pins")
    c.add_argument("--json", action="store_true")
    c.set_defaults(func=_cmd_list)
    c = dsub.add_parser("show", help="a pin, and whether all its rows are still in the lake (exit 2 if not)")
    c.add_argument("name")
    c.add_argument("--json", action="store_true")
    c.set_defaults(func=_cmd_show)
    c = dsub.add_parser("delete", help="delete a pin (GC may then remove what only it held)")
    c.add_argument("name")
    c.set_defaults(func=_cmd_delete)
    c = dsub.add_parser(
        "copy", help="copy a pin (its files, rows and the pin, verified, resumable) into another lake"
    )
    c.add_argument("name")
    c.add_argument("dest", help="the destination lake: a local path or s3://bucket/prefix")
    c.add_argument("--dest-catalog", default=None, help="the destination's catalog to bring up to date")
    c.add_argument("--workers", type=int, default=16, help="transfers in flight")
    c.add_argument("--part-mib", type=int, default=64, help="objects larger than this move in parts")
    c.add_argument(
        "--readback", action="store_true", help="read written files back, compare sha256 (2x traffic)"
    )
    c.add_argument(
        "--digest", action="store_true", help="keep a sha256 of every file in the copy manifest (more CPU)"
    )
    c.add_argument("--quiet", action="store_true", help="no progress bar")
    c.add_argument("--json", action="store_true")
    c.add_argument("--flink", action="store_true", help="run the copy as a PyFlink batch job (mini-cluster)")
    c.add_argument("--parallelism", type=int, default=2, help="with --flink: subtasks, the file list split")
    c.add_argument("--cluster", metavar="URL", default=None, help="run the job on this Flink session cluster")
    c.set_defaults(func=_cmd_copy)
    c = dsub.add_parser("stage", help="fill a training host's loader cache with a pin's data")
    c.add_argument("name")
    c.add_argument("--cache", required=True, help="the loader cache directory (train with --cache-dir DIR)")
    c.add_argument("--cache-gib", type=float, default=100.0, help="the cache's size limit")
    c.add_argument("--workers", type=int, default=None, help="files fetched at once (default 16)")
    c.add_argument("--quiet", action="store_true", help="no progress bar")
    c.set_defaults(func=_cmd_stage)
