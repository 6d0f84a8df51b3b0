"""One measuring leg on one lake, in its own process (fresh imports, caches and memory):

    python -m benchmarks.lifecycle._probe --lake DIR --camera NAME [--batches 200] [--digests 64]

Times `pi_loader.Dataset(lake, ...)` (the open: Delta logs, episodes rows, this host's copy of
them under $TMPDIR, which the parent sets per leg), then takes `--batches` shuffled batches
through `Loader(ds, batch_size, num_workers)` with one camera: samples/s over the batches after
`--warmup` (the first ones include the workers' start) and over all of them (`samples_per_s_all`:
where a fresh host's index builds land in the first batches, the window alone hides them), CPU
per sample of the process tree, and
`loader.stats()` (bytes read per sample: Parquet footers plus the column chunks read), and how
long `loader.close()` took. With
`--digests N`, a sha256 of each of the first N samples of the seeded order (every array's dtype,
shape and bytes, the episode id and step), compared by the parent before/after compaction.
Prints one JSON line prefixed with `benchmarks.loader._timing.RESULT_PREFIX`.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import time
from pathlib import Path
from typing import Any

from benchmarks.loader._timing import report, tree_cpu_s


def sample_digest(sample: dict[str, Any]) -> str:
    import numpy as np

    h = hashlib.sha256()
    for key in sorted(sample):
        value = sample[key]
        h.update(key.encode())
        if isinstance(value, np.ndarray):
            h.update(f"{value.dtype}{value.shape}".encode())
            h.update(np.ascontiguousarray(value).tobytes())
        else:
            h.update(repr(value).encode())
    return h.hexdigest()


def probe(args: argparse.Namespace) -> dict[str, Any]:
    import pi_loader

    started = time.perf_counter()
    ds = pi_loader.Dataset(str(args.lake), seed=args.seed, cameras=[args.camera], action_horizon=args.horizon)
    open_s = time.perf_counter() - started
    loader = pi_loader.Loader(
        ds,
        batch_size=args.batch_size,
        shard=pi_loader.ShardSpec(index=0, count=1),
        num_workers=args.workers,
    )
    it = iter(loader)
    started = time.perf_counter()
    first_batch_s = window_start = cpu_start = None
    for i in range(args.batches):
        batch = next(it)
        del batch
        if i == 0:
            first_batch_s = time.perf_counter() - started
        if i == args.warmup - 1:
            window_start, cpu_start = time.perf_counter(), tree_cpu_s()
    ended = time.perf_counter()
    window_s = ended - (window_start or started)
    cpu_end = tree_cpu_s()
    timed = (args.batches - args.warmup) * args.batch_size
    stats = loader.stats()
    closing = time.perf_counter()
    loader.close()
    close_s = time.perf_counter() - closing
    result: dict[str, Any] = {
        "episodes": len(ds.episode_ids),
        "samples_in_dataset": len(ds),
        "table_versions": dict(ds.snapshot.table_versions),
        "open_s": round(open_s, 4),
        "first_batch_s": None if first_batch_s is None else round(first_batch_s, 3),
        "timed_samples": timed,
        "samples_per_s": round(timed / window_s, 1),
        # every batch, the first ones included: what a reader waits for the whole pass, where the
        # per-file indexes a fresh host builds land wherever the files are first touched
        "all_batches_s": round(ended - started, 3),
        "samples_per_s_all": round(args.batches * args.batch_size / (ended - started), 1),
        "cpu_ms_per_sample": None
        if cpu_start is None or cpu_end is None
        else round((cpu_end - cpu_start) * 1e3 / timed, 3),
        # stopping the workers with prefetched batches unread (measured: ~5 s per worker, each
        # joined with a 5 s timeout, then terminated)
        "close_s": round(close_s, 2),
        "loader_stats": {
            "samples": stats.samples,
            "bytes_read": stats.bytes_read,
            "bytes_read_per_sample": round(stats.bytes_read_per_sample, 1),
            "footer_reads": stats.footer_reads,
            "video_reads": stats.video_reads,
            "steps_reads": stats.steps_reads,
            "chunk_decodes": stats.chunk_decodes,
            "steps_index_builds": stats.steps_index_builds,
            "chunk_index_builds": stats.chunk_index_builds,
        },
    }
    if args.digests:
        result["digests"] = [sample_digest(ds[i]) for i in range(args.digests)]
        result["digest_samples"] = [list(ds.locate(i)) for i in range(min(4, args.digests))]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--lake", type=Path, required=True)
    parser.add_argument("--camera", required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--horizon", type=int, default=50)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--digests", type=int, default=0)
    args = parser.parse_args()
    if not 1 <= args.warmup < args.batches:
        parser.error("need 1 <= --warmup < --batches")
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    report(probe(args))


if __name__ == "__main__":
    main()
