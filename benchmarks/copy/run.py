"""`pilake dataset copy` throughput against a plain parallel object copy of the same bytes.

A pin of every episode of the loader benchmark's lake (benchmarks/loader/_data.py) is copied
local -> a real SeaweedFS (`weed mini`, as the tests start it) by `copy_dataset` (checks,
manifest, commits, the pin: the whole command), and the same steps/video files are copied by a
plain pool of the same number of threads with the same library (pyarrow.fs: read, write). The
legs alternate (interleaved repeats, each into a fresh prefix); the ratio is copy bytes/s over
plain bytes/s per repeat, reported as median and spread. Prints a table and writes JSON.

    .venv/bin/python -m benchmarks.copy.run --repeats 3 --out benchmarks/baselines/copy.json
"""

from __future__ import annotations

import argparse
import json
import secrets
import socket
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _plain(lake: Path, files: list[str], fs: object, prefix: str, workers: int) -> tuple[int, float]:
    def one(relative: str) -> int:
        data = (lake / relative).read_bytes()
        with fs.open_output_stream(f"{prefix}/{relative}") as out:  # type: ignore[attr-defined]
            out.write(data)
        return len(data)

    t0 = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        sent = sum(pool.map(one, files))
    return sent, time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=24)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    import os

    from pi_format import LakeLayout
    from pi_jobs.datasets import CopyOptions, copy_dataset
    from pi_jobs.datasets._rows import source_rows
    from pi_jobs.datasets.copy import _plan
    from pi_jobs.local.object_store import ObjectStoreConfig, start_object_store, stop_object_store
    from pi_jobs.maintenance.datasets import create_dataset
    from pi_loader.reading._storage import S3Options

    from benchmarks.loader._data import DataConfig, build_lake

    with tempfile.TemporaryDirectory(prefix="pilake-copy-bench-") as tmp:
        root = Path(tmp)
        lake = build_lake(DataConfig(episodes=args.episodes, duration_s=4.0, size_px=96), root / "data")
        layout = LakeLayout(str(lake))
        pin = create_dataset(layout, "bench")
        files = [job.relative for job in _plan(layout, source_rows(layout, pin))]
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
        rows = []
        try:
            fs = S3Options.from_storage_options(options).filesystem()
            for r in range(args.repeats):
                plain_bytes, plain_s = _plain(lake, files, fs, f"bench/plain-{r}", args.workers)
                report = copy_dataset(
                    str(lake),
                    "bench",
                    f"s3://bench/copy-{r}",
                    options=CopyOptions(workers=args.workers),
                    show_progress=False,
                )
                copy_rate = report.bytes_sent / report.seconds
                plain_rate = plain_bytes / plain_s
                rows.append(
                    {
                        "repeat": r,
                        "bytes": report.bytes_sent,
                        "copy_s": report.seconds,
                        "plain_s": round(plain_s, 3),
                        "copy_mib_s": round(copy_rate / 2**20, 1),
                        "plain_mib_s": round(plain_rate / 2**20, 1),
                        "ratio": round(copy_rate / plain_rate, 3),
                    }
                )
                print(rows[-1], flush=True)
        finally:
            stop_object_store(root / "run")
    ratios = [row["ratio"] for row in rows]
    result = {
        "what": "copy_dataset local -> SeaweedFS vs a plain pyarrow.fs thread-pool copy of the same files",
        "episodes": args.episodes,
        "files": len(files),
        "workers": args.workers,
        "repeats": rows,
        "ratio_median": statistics.median(ratios),
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
    }
    print(f"{'repeat':>6} {'MiB':>8} {'copy MiB/s':>11} {'plain MiB/s':>12} {'ratio':>6}")
    for row in rows:
        print(
            f"{row['repeat']:>6} {row['bytes'] / 2**20:>8.1f} {row['copy_mib_s']:>11} "
            f"{row['plain_mib_s']:>12} {row['ratio']:>6}"
        )
    print(f"ratio median {result['ratio_median']} (min {result['ratio_min']}, max {result['ratio_max']})")
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
