"""Bytes fetched from S3 per sample, cold and warm host cache (issue 32 item 3).

Builds a lake the way the stream job writes it (LakeWriter, one commit per episode:
benchmarks/loader/_data.py), compacts it (`pi_jobs.maintenance.compaction.compact`, the layout a
long-running lake has), starts SeaweedFS (as `pilake up --s3` does) on a free port in a temp
dir and uploads the lake. Then reads the same samples through `pi_loader.Dataset` in three legs,
interleaved, for each repeat and each sample set:

* local: the lake on local disk (what a reader asks for: `read_stats["bytes_read"]`, the
  encoded bytes returned: footers, the small columns a host index is built from, the column
  chunks and steps pages of each sample);
* cold: the lake on SeaweedFS with an empty host cache (fresh cache and index directories);
* warm: the same, again, with the cache the cold leg filled.

Bytes fetched are the loader's own counters: `read_stats["s3_fetched_bytes"]` (what the store
sent for ranged reads) plus the cache's `downloaded_bytes` for whole files; what the open reads
(the episodes rows and Delta logs) is recorded apart. The target: cold fetched per sample within
1.5x of the encoded bytes returned, as on local disk; warm fetches 0.

Sample sets: "spread" draws as many samples as the lake has episodes, uniformly (most samples
the only one of their episode, every file cold: the worst case for ranges), "shuffled" 4x that.

    .venv/bin/python -m benchmarks.loader.s3_bytes --episodes 24 --repeats 3 \
        --out benchmarks/baselines/s3_bytes.json
"""

from __future__ import annotations

import argparse
import json
import secrets
import socket
import statistics
import tempfile
from pathlib import Path
from typing import Any


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _leg(uri: str, options: dict[str, str] | None, cache: Path, indices: list[int]) -> dict[str, float]:
    from pi_loader import CacheConfig, Dataset
    from pi_loader.reading._storage import S3Storage

    ds = Dataset(uri, seed=0, storage_options=options, cache=CacheConfig(cache, 2**34))
    storage = ds._storage
    remote = isinstance(storage, S3Storage)
    before = ds.read_stats
    opened = storage.stats().downloaded_bytes if isinstance(storage, S3Storage) else 0
    for i in indices:
        ds[i]
    after = ds.read_stats
    n = len(indices)
    whole = (storage.stats().downloaded_bytes if isinstance(storage, S3Storage) else 0) - opened
    ranged = after["s3_fetched_bytes"] - before["s3_fetched_bytes"]
    # the cache counts ranges as downloads too: whole files are what it counted beyond them
    fetched = max(whole, ranged) if remote else 0
    returned = after["bytes_read"] - before["bytes_read"]
    return {
        "samples": n,
        "open_bytes_fetched": opened,
        "bytes_fetched_per_sample": fetched / n,
        "encoded_bytes_returned_per_sample": returned / n,
        "range_requests_per_sample": (after["s3_range_requests"] - before["s3_range_requests"]) / n,
        "fetched_over_returned": fetched / returned if returned else 0.0,
    }


def _summary(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=24)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    import numpy as np
    from pi_format import LakeLayout
    from pi_jobs.local.object_store import ObjectStoreConfig, start_object_store, stop_object_store
    from pi_jobs.maintenance.compaction import compact
    from pi_loader import Dataset
    from pi_loader.reading._storage import S3Options

    from benchmarks.loader._data import DataConfig, build_lake

    with tempfile.TemporaryDirectory(prefix="pilake-s3-bytes-") as tmp:
        root = Path(tmp)
        lake = build_lake(DataConfig(episodes=args.episodes, duration_s=4.0, size_px=96), root / "data")
        report = compact(LakeLayout(str(lake)))
        files = {t: int(report.files_after[t]) for t in ("episodes", "steps", "video")}  # live files
        port, key, secret = _free_port(), f"bench-{secrets.token_hex(4)}", secrets.token_urlsafe(24)
        config = ObjectStoreConfig(
            root / "s3", s3_port=port, bucket="bench", access_key_id=key, secret_access_key=secret
        )
        start_object_store(config, root / "run")
        try:
            options = {
                "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
                "AWS_ALLOW_HTTP": "true",
                "AWS_ACCESS_KEY_ID": key,
                "AWS_SECRET_ACCESS_KEY": secret,
                "AWS_REGION": "us-east-1",
            }
            fs = S3Options.from_storage_options(options).filesystem()
            for path in sorted(lake.rglob("*")):
                if path.is_file():
                    with fs.open_output_stream(f"bench/lake/{path.relative_to(lake)}") as out:
                        out.write(path.read_bytes())
            uri = "s3://bench/lake"
            total = len(Dataset(str(lake), seed=0))
            runs: dict[str, list[dict[str, dict[str, float]]]] = {"spread": [], "shuffled": []}
            for repeat in range(args.repeats):
                for name, count in (("spread", args.episodes), ("shuffled", 4 * args.episodes)):
                    rng = np.random.default_rng(1000 * repeat + count)
                    indices = rng.choice(total, size=min(count, total), replace=False).tolist()
                    tag = f"{name}-{repeat}"
                    legs: dict[str, dict[str, float]] = {
                        "local": _leg(str(lake), None, root / f"local-cache-{tag}", indices),
                        "cold": _leg(uri, options, root / f"cache-{tag}", indices),
                        "warm": _leg(uri, options, root / f"cache-{tag}", indices),
                    }
                    print(name, repeat, json.dumps(legs), flush=True)
                    runs[name].append(legs)
        finally:
            stop_object_store(root / "run")
    result: dict[str, Any] = {
        "note": (
            "SeaweedFS on 127.0.0.1, 2-core VM; 96 px, 4 s episodes, one commit per episode then "
            "compacted; cold = empty host cache (ranged reads), warm = the cache the cold leg filled; "
            "returned = encoded bytes the reader asked for (footers, index columns, chunks, pages), "
            "the same on local disk"
        ),
        "episodes": args.episodes,
        "files_after_compaction": files,
        "compaction_files_before": dict(report.files_before),
        "repeats": args.repeats,
        "target_fetched_over_returned": 1.5,
    }
    for name, done in runs.items():
        summary: dict[str, Any] = {
            "runs": done,
            "cold_fetched_over_returned": _summary([r["cold"]["fetched_over_returned"] for r in done]),
            "cold_fetched_over_local_returned": _summary(
                [
                    r["cold"]["bytes_fetched_per_sample"] / r["local"]["encoded_bytes_returned_per_sample"]
                    for r in done
                ]
            ),
            "cold_bytes_fetched_per_sample": _summary([r["cold"]["bytes_fetched_per_sample"] for r in done]),
            "warm_bytes_fetched_per_sample": _summary([r["warm"]["bytes_fetched_per_sample"] for r in done]),
            "encoded_bytes_returned_per_sample": _summary(
                [r["cold"]["encoded_bytes_returned_per_sample"] for r in done]
            ),
        }
        summary["target_met"] = summary["cold_fetched_over_returned"]["max"] <= 1.5
        result[name] = summary
    print(json.dumps({k: v for k, v in result.items() if k not in ("spread", "shuffled")}, indent=2))
    for name in runs:
        print(name, json.dumps({k: v for k, v in result[name].items() if k != "runs"}, indent=2))
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
