"""`pilake dataset copy` throughput against a plain parallel object copy of the same bytes.

A pin of every episode of the copy benchmark's lake (`benchmarks.copy._lake`: 128 one-minute
224 px episodes in group commits of 4, ~555 MB in 64 files, through the real write path) is
copied by `copy_dataset` (page-CRC checks, sha256, manifest, listing check, Delta commits, the
rows, the pin: the whole command) local -> a real SeaweedFS (`weed mini`, as the tests start it)
and local -> local; the same steps/video files are copied by a plain pool of the same number of
threads with the same library (pyarrow.fs: read the file, write it through
`open_output_stream`). Every leg runs once untimed first (the store's volumes allocated, the
modules imported, the connections opened). Then each repeat runs the SeaweedFS legs as
plain, copy, copy, plain (copy, plain, plain, copy in odd repeats: a drift within the repeat
cancels) and the local legs once each in alternating order, every leg into a fresh prefix; the
ratio is plain seconds over copy seconds per repeat and end, reported as median and spread
(min-max). Prints a table and writes JSON.

    .venv/bin/python -m benchmarks.copy.run --repeats 6 --out benchmarks/baselines/copy.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import secrets
import shutil
import socket
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import Any

TARGET = 0.8  # issue 33: within 80% of a plain parallel object copy


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _plain(
    lake: Path, files: list[str], fs: Any, prefix: str, workers: int, *, fsync: bool = False
) -> tuple[int, float]:
    """Read each file and write it through `fs` (or, with `fsync`, to a local file that is
    flushed to disk before close, as the copy makes a local file durable before committing it)."""

    def one(relative: str) -> int:
        with open(lake / relative, "rb") as handle:
            data = handle.read()
        if fsync:
            with open(f"{prefix}/{relative}", "wb") as local:
                local.write(data)
                local.flush()
                os.fsync(local.fileno())
        else:
            with fs.open_output_stream(f"{prefix}/{relative}") as out:
                out.write(data)
        return len(data)

    t0 = time.perf_counter()
    for directory in sorted({f.split("/", 1)[0] for f in files}):
        fs.create_dir(f"{prefix}/{directory}", recursive=True)
    with ThreadPoolExecutor(workers) as pool:
        sent = sum(pool.map(one, files))
    return sent, time.perf_counter() - t0


def _cpu() -> float:
    """CPU seconds of this process so far (every thread, user and system)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _store_pids(marker: str) -> list[int]:
    """The pids of the processes whose command line holds `marker` (the store's data directory)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as handle:
                    if marker.encode() in handle.read():
                        pids.append(int(entry))
            except OSError:
                continue
    return pids


def _pids_cpu(pids: list[int]) -> float:
    """CPU seconds (user and system) the processes `pids` used so far; 0 for one that is gone."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except (OSError, IndexError, ValueError):
            continue
    return total / os.sysconf("SC_CLK_TCK")


def _code() -> str:
    """The commit the benchmark ran (with '+changes' when the tree differs from it)."""
    import subprocess

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], capture_output=True, text=True, check=False)
        return done.stdout.strip()

    changed = git("status", "--porcelain", "--untracked-files=no")
    return git("rev-parse", "--short", "HEAD") + ("+changes" if changed else "")


def _spread(values: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(values), 3), "min": min(values), "max": max(values)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    # 64: legs of ~5-10 s, so the copy's fixed cost (a fresh destination's tables, the commits:
    # ~0.4 s) and the store's second-scale stalls weigh on a throughput figure as they would on a
    # copy of many GB no more than they must
    parser.add_argument("--replicas", type=int, default=64, help="commits of each of 2 encoded episodes")
    parser.add_argument("--repeats", type=int, default=6)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--data", type=Path, default=Path("benchmarks/copy/results/data"))
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--load-label", default="", help="what else ran on the host (recorded in the JSON)")
    args = parser.parse_args()
    loadavg_start = list(os.getloadavg())

    import pyarrow.fs as pafs
    from pi_format import LakeLayout
    from pi_format.lake import PinStore
    from pi_jobs.datasets import CopyOptions, copy_dataset
    from pi_jobs.datasets._rows import source_rows
    from pi_jobs.datasets.copy import _plan
    from pi_jobs.local.object_store import ObjectStoreConfig, start_object_store, stop_object_store
    from pi_jobs.maintenance.datasets import create_dataset
    from pi_loader.reading._storage import S3Options

    from benchmarks.copy._lake import CopyLakeConfig, build_copy_lake

    lake_config = CopyLakeConfig(replicas=args.replicas)
    data_dir = args.data.absolute()
    lake = build_copy_lake(lake_config, data_dir / lake_config.key)
    layout = LakeLayout(str(lake))
    pin = PinStore(layout).find("bench") or create_dataset(layout, "bench")
    files = [job.relative for job in _plan(layout, source_rows(layout, pin))]
    total = sum((lake / f).stat().st_size for f in files)
    for relative in files:  # both legs read the source from the page cache: warmed once, untimed
        (lake / relative).read_bytes()
    with tempfile.TemporaryDirectory(prefix="pilake-copy-bench-", dir=data_dir) as tmp:
        root = Path(tmp)
        port, key, secret = _free_port(), f"bench-{secrets.token_hex(4)}", secrets.token_urlsafe(24)
        config = ObjectStoreConfig(
            root / "s3", s3_port=port, bucket="bench", access_key_id=key, secret_access_key=secret
        )
        start_object_store(config, root / "run")
        options = {
            "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
            "AWS_ALLOW_HTTP": "true",
            "AWS_ACCESS_KEY_ID": key,
            "AWS_SECRET_ACCESS_KEY": secret,
            "AWS_REGION": "us-east-1",
            "AWS_CONDITIONAL_PUT": "etag",
        }
        os.environ.update(options)
        rows: list[dict[str, Any]] = []
        local_fs = pafs.LocalFileSystem()
        fixed: dict[str, float] = {}
        try:
            s3_fs = S3Options.from_storage_options(options).filesystem()

            store_pids = _store_pids(f"-dir={root / 's3'}")

            def leg(end: str, kind: str, tag: str) -> tuple[float, float, float]:
                """(seconds, CPU seconds of this process, of the store's) of one leg into a fresh prefix."""
                # every leg starts from the same state: the dirty pages of the legs before
                # (SeaweedFS's volume files, the local copies) written back untimed, so a leg
                # does not pay for its predecessor's writeback
                os.sync()
                time.sleep(1.0)
                cpu, store_cpu = _cpu(), _pids_cpu(store_pids)
                if kind.startswith("plain"):
                    fs, prefix = (s3_fs, f"bench/{kind}-{tag}")
                    if end == "local":
                        fs, prefix = local_fs, str(root / f"{kind}-{tag}")
                    sent, seconds = _plain(lake, files, fs, prefix, args.workers, fsync=kind == "plain_fsync")
                else:
                    dest = f"s3://bench/copy-{tag}" if end == "s3" else str(root / f"copy-{tag}")
                    copy_options = CopyOptions(workers=args.workers)
                    report = copy_dataset(str(lake), "bench", dest, options=copy_options, show_progress=False)
                    sent, seconds = report.bytes_sent, report.seconds
                assert sent == total, (kind, end, sent, total)
                return seconds, _cpu() - cpu, _pids_cpu(store_pids) - store_cpu

            # untimed: SeaweedFS allocates its volumes on the first writes, the first copy imports
            # deltalake and opens its connections; neither leg of repeat 0 pays for that
            for end, kinds in (("s3", ("plain", "copy")), ("local", ("plain", "plain_fsync", "copy"))):
                for kind in kinds:
                    leg(end, kind, "warm")
            # a copy with nothing to send (the pin already there): its fixed cost, untimed above
            started = time.perf_counter()
            copy_dataset(str(lake), "bench", "s3://bench/copy-warm", show_progress=False)
            fixed["s3_nothing_to_send_s"] = round(time.perf_counter() - started, 3)
            for r in range(args.repeats):
                row: dict[str, Any] = {"repeat": r, "loadavg_1m": round(os.getloadavg()[0], 2)}
                order = ["plain", "copy", "copy", "plain"]
                if r % 2:
                    order.reverse()
                legs: dict[str, list[tuple[float, float, float]]] = {"plain": [], "copy": []}
                for i, kind in enumerate(order):
                    legs[kind].append(leg("s3", kind, f"{r}-{i}"))
                for kind, timed in legs.items():
                    seconds = statistics.mean(t for t, _, _ in timed)
                    row[f"s3_{kind}_legs_s"] = [round(t, 3) for t, _, _ in timed]
                    row[f"s3_{kind}_s"] = round(seconds, 3)
                    row[f"s3_{kind}_mib_s"] = round(total / seconds / 2**20, 1)
                    cpu_s = statistics.mean(c for _, c, _ in timed)
                    row[f"s3_{kind}_cpu_s_per_gib"] = round(cpu_s / total * 2**30, 2)
                    store_s = statistics.mean(c for _, _, c in timed)
                    row[f"s3_{kind}_store_cpu_s_per_gib"] = round(store_s / total * 2**30, 2)
                row["s3_ratio"] = round(row["s3_plain_s"] / row["s3_copy_s"], 3)
                local = ["plain", "plain_fsync", "copy"] if r % 2 == 0 else ["copy", "plain_fsync", "plain"]
                for kind in local:
                    seconds, cpu, _ = leg("local", kind, str(r))
                    row[f"local_{kind}_s"] = round(seconds, 3)
                    row[f"local_{kind}_mib_s"] = round(total / seconds / 2**20, 1)
                    row[f"local_{kind}_cpu_s_per_gib"] = round(cpu / total * 2**30, 2)
                row["local_ratio"] = round(row["local_plain_s"] / row["local_copy_s"], 3)
                row["local_ratio_fsync"] = round(row["local_plain_fsync_s"] / row["local_copy_s"], 3)
                for kind in ("copy", "plain", "plain_fsync"):
                    shutil.rmtree(root / f"{kind}-{r}", ignore_errors=True)
                for i in range(4):  # the store's space back (its volumes reclaim it later)
                    for kind in ("plain", "copy"):
                        s3_fs.delete_dir_contents(f"bench/{kind}-{r}-{i}", missing_dir_ok=True)
                rows.append(row)
                print(row, flush=True)
        finally:
            stop_object_store(root / "run")
    ratios = {end: _spread([row[f"{end}_ratio"] for row in rows]) for end in ("s3", "local")}
    ratios["local_fsync"] = _spread([row["local_ratio_fsync"] for row in rows])
    result = {
        "what": (
            "copy_dataset (the whole command: checks, manifest, commits, the pin) vs a plain pyarrow.fs "
            "thread-pool copy of the same files, local -> SeaweedFS and local -> local, interleaved"
        ),
        "lake": asdict(lake_config),
        "episodes": len(pin.episode_ids),
        "files": len(files),
        "bytes": total,
        "workers": args.workers,
        "cpus": os.cpu_count(),
        "loadavg_start": loadavg_start,
        "loadavg_end": list(os.getloadavg()),
        "load": args.load_label,
        "notes": {
            "fairness": (
                "the same files (the pin's steps and video files), the same thread count and so the same "
                "number of files in flight in both legs (--workers; both share pyarrow's IO pool for "
                "background uploads), each leg into a fresh prefix, os.sync() and 1 s before every leg "
                "(untimed) so no leg pays for the writeback of the one before"
            ),
            "design": (
                "the plain leg to SeaweedFS on this shared 2-core VM swings 49-128 MiB/s from one leg to the "
                "next (copy.json of 2026-11-27: 7 repeats of one plain and one copy leg each, 277 MB): a "
                "ratio of single legs measured that noise as much as the copy. So: every leg runs once "
                "untimed first (repeat 0's legs paid for SeaweedFS's first volume allocation and the "
                "copy's first imports and connections; a copy of TBs pays them once), each repeat runs "
                "plain, copy, copy, plain (or the reverse) and its ratio is the mean plain over the mean "
                "copy seconds (a drift within the repeat cancels), and the lake is twice as large (legs of "
                "5-10 s): the same bytes, library, concurrency and checks as before, less of the store's "
                "second-scale stalls and of the command's fixed cost in a throughput figure. "
                "s3_nothing_to_send_s is that fixed cost: the same copy run again with nothing to send"
            ),
            "page_cache": (
                "the source (~555 MB) is read once untimed before the first repeat, so both legs read it "
                "from the page cache (neither drops it: no leg is favoured), and SeaweedFS writes into "
                "it too: a data set larger than memory (24 GB here, shared by other work) is out of reach "
                "of a benchmark of minutes on this host; the figures are CPU-bound, not disk-bound"
            ),
            "copy_extra_work": (
                "the copy checks every page CRC (page_walk: the footer's chunk table, numpy over every "
                "chunk, zlib-ng per page; ~1.45 s of CPU per GiB of the lake's files measured alone, was "
                "~1.65 with zlib's CRC and ~2.1 before that), reads the Delta logs and pin, makes a fresh "
                "destination's tables while the files go out, and commits files, rows, the catalog and "
                "the pin; a sha256 of every file (~0.75 s/GiB) only with --digest/--readback (off here); "
                "the checks "
                "run beside the upload of the same file. *_cpu_s_per_gib: this process's CPU per GiB "
                "copied in each leg (SeaweedFS's own is not in it: *_store_cpu_s_per_gib, read from /proc)"
            ),
            "local_fsync": (
                "the copy fsyncs each local file before it is renamed into place and committed (a "
                "correctness cost: a Delta log must never name a file a crash can lose); local_fsync is "
                "the ratio against a plain copy that fsyncs each file too"
            ),
        },
        "fixed": fixed,
        "repeats": rows,
        "code": _code(),
        "s3_cpu_s_per_gib": {
            kind: _spread([r[f"s3_{kind}_cpu_s_per_gib"] for r in rows]) for kind in ("copy", "plain")
        },
        "s3_store_cpu_s_per_gib": {
            kind: _spread([r[f"s3_{kind}_store_cpu_s_per_gib"] for r in rows]) for kind in ("copy", "plain")
        },
        "ratio": ratios,
        "target": TARGET,
        "met": {end: ratios[end]["min"] >= TARGET for end in ratios},
    }
    print(
        f"{'repeat':>6} {'s3 copy':>8} {'s3 plain':>9} {'ratio':>6} "
        f"{'local copy':>11} {'local plain':>12} {'ratio':>6}"
    )
    for row in rows:
        print(
            f"{row['repeat']:>6} {row['s3_copy_mib_s']:>8} {row['s3_plain_mib_s']:>9} {row['s3_ratio']:>6} "
            f"{row['local_copy_mib_s']:>11} {row['local_plain_mib_s']:>12} {row['local_ratio']:>6}"
        )
    for end, spread in ratios.items():
        print(
            f"{end}: ratio median {spread['median']} ({spread['min']}-{spread['max']}), target {TARGET}: "
            f"{'met' if result['met'][end] else 'missed'}"
        )
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
