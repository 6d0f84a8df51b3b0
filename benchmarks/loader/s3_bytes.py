"""Bytes fetched from S3 per sample, cold and warm host cache (issue 32 item 3).

Starts SeaweedFS (as `pilake up --s3` does) on a free port in a temp dir, uploads the loader
benchmark's lake (benchmarks/loader/_data.py, small config), and reads the same samples through
`pi_loader.Dataset` twice: with an empty host cache (cold) and again with the cache it filled
(warm). Prints and writes JSON: bytes downloaded into the cache per sample vs the encoded bytes
the samples' reads returned (`read_stats["bytes_read"]`: footers plus column chunks).

    .venv/bin/python -m benchmarks.loader.s3_bytes --samples 200 --out benchmarks/loader/results/s3_bytes.json
"""

from __future__ import annotations

import argparse
import json
import secrets
import socket
import tempfile
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _leg(uri: str, options: dict[str, str], cache: Path, samples: int) -> dict[str, float]:
    from pi_loader import CacheConfig, Dataset
    from pi_loader.reading._storage import S3Storage

    ds = Dataset(uri, seed=0, storage_options=options, cache=CacheConfig(cache, 2**34))
    storage = ds._storage
    assert isinstance(storage, S3Storage)
    opened = storage.stats().downloaded_bytes
    read_before = ds.read_stats["bytes_read"]
    n = min(samples, len(ds))
    for i in range(n):
        ds[i]
    fetched = storage.stats().downloaded_bytes - opened
    returned = ds.read_stats["bytes_read"] - read_before
    return {
        "samples": n,
        "open_bytes_fetched": opened,
        "bytes_fetched_per_sample": fetched / n,
        "encoded_bytes_read_per_sample": returned / n,
        "fetched_over_read": fetched / returned if returned else 0.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--episodes", type=int, default=6)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    from pi_jobs.local.object_store import ObjectStoreConfig, start_object_store, stop_object_store
    from pi_loader.reading._storage import S3Options

    from benchmarks.loader._data import DataConfig, build_lake

    with tempfile.TemporaryDirectory(prefix="pilake-s3-bytes-") as tmp:
        root = Path(tmp)
        lake = build_lake(DataConfig(episodes=args.episodes, duration_s=4.0, size_px=96), root / "data")
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
            cold = _leg(uri, options, root / "cache", args.samples)
            warm = _leg(uri, options, root / "cache", args.samples)
        finally:
            stop_object_store(root / "run")
    result = {"episodes": args.episodes, "cold": cold, "warm": warm}
    print(json.dumps(result, indent=2))
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
