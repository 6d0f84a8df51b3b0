"""One lake's open and memory probe, in its own process (so its memory high-water mark is its own).

    python -m benchmarks.scale._probe --lake DIR [--catalog DIR] --workers 2 --batches 30

Opens `pi_loader.Dataset` on every committed episode (timed), takes `--batches` shuffled batches
through `pi_loader.Loader` with `--workers` worker processes and fixed cache settings, then
reads the RSS high-water mark (VmHWM) of this process and of each worker, and what the loader
says it read. With `--catalog` it also times opening the same episodes selected with SQL. Prints
one JSON line prefixed with `_timing.RESULT_PREFIX` (benchmarks/loader/_timing.py).

The loader keeps per-host indexes of the steps and video files (pi_loader.reading._steps_index,
_chunk_index) under TMPDIR for a local lake: run.py runs this probe twice on one fresh TMPDIR,
"cold host" (the indexes are built during the probe: `steps_index_builds`, `chunk_index_builds`)
and then "warm host" (a fresh process, cold per-process caches, the host's indexes in place).

`encoded_sizes` (imported by run.py, run in the parent) is the other side of bytes per sample:
the encoded bytes of the video rows holding the frames a uniformly drawn sample returns.
"""

from __future__ import annotations

import argparse
import os
import random
import time
from pathlib import Path
from typing import Any

from benchmarks.loader._timing import report


def proc_kb(pid: int | str, field: str) -> int | None:
    """A `Vm*`/`Rss*` field of /proc/<pid>/status in kB (None when the process is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def _mb(kb: int | None) -> float | None:
    return None if kb is None else round(kb / 1024, 1)


def worker_pids() -> list[int]:
    """This process's loader workers: spawned processes, or the children of a forkserver (the
    loader's default start method; the forkserver itself and the resource tracker left out)."""
    import psutil  # type: ignore[import-untyped]

    out = []
    for child in psutil.Process().children(recursive=True):
        try:
            spawned = any("spawn_main" in part for part in child.cmdline())
            parent = child.parent()
            forked = parent is not None and any("multiprocessing.forkserver" in p for p in parent.cmdline())
            if spawned or forked:
                out.append(child.pid)
        except psutil.Error:
            pass
    return out


def bytes_read(stats: Any) -> int:
    """Bytes the loader read from lake files (Parquet footers and the compressed column chunks of
    the steps and video row groups), summed over its processes: `LoaderStats.bytes_read`.

    Raises NotImplementedError on a pi_loader without that counter: the figure is then recorded
    as null with the reason, never estimated.
    """
    value = getattr(stats, "bytes_read", None)
    if value is None:
        raise NotImplementedError("this pi_loader's LoaderStats has no bytes_read counter")
    return int(value)


def probe(args: argparse.Namespace) -> dict[str, Any]:
    import pi_loader

    cache = {"chunk_cache_size": args.chunk_cache, "episode_cache_size": args.episode_cache}
    start = time.perf_counter()
    ds = pi_loader.Dataset(str(args.lake), seed=args.seed, action_horizon=args.horizon, **cache)
    open_s = time.perf_counter() - start
    # the same open again in this process: what a second Dataset on the same lake costs (a
    # trainer's evaluation split, a restart in-process) with the process's caches warm
    start = time.perf_counter()
    pi_loader.Dataset(str(args.lake), seed=args.seed, action_horizon=args.horizon, **cache)
    open_again_s = time.perf_counter() - start
    after_open = {"hwm_mb": _mb(proc_kb("self", "VmHWM")), "rss_mb": _mb(proc_kb("self", "VmRSS"))}
    loader = pi_loader.Loader(
        ds, batch_size=args.batch_size, shard=pi_loader.ShardSpec(index=0, count=1), num_workers=args.workers
    )
    started = time.perf_counter()
    first_batch_s = None
    it = iter(loader)
    for _ in range(args.batches):
        batch = next(it)
        if first_batch_s is None:
            first_batch_s = time.perf_counter() - started
        del batch
    batches_s = time.perf_counter() - started
    workers = []
    for pid in worker_pids():
        workers.append(
            {
                "pid": pid,
                "hwm_mb": _mb(proc_kb(pid, "VmHWM")),
                "rss_mb": _mb(proc_kb(pid, "VmRSS")),
                "rss_anon_mb": _mb(proc_kb(pid, "RssAnon")),
                "rss_file_mb": _mb(proc_kb(pid, "RssFile")),
                "rss_shmem_mb": _mb(proc_kb(pid, "RssShmem")),
            }
        )
    stats = loader.stats()
    try:
        read: dict[str, Any] = {"bytes": bytes_read(stats), "why": None}
    except NotImplementedError as err:
        read = {"bytes": None, "why": str(err)}
    loader.close()
    result: dict[str, Any] = {
        "episodes": len(ds.episode_ids),
        "samples": len(ds),
        "open_s": round(open_s, 3),
        "open_again_s": round(open_again_s, 3),
        "cache": cache,
        "main_after_open": after_open,
        "main": {"hwm_mb": _mb(proc_kb("self", "VmHWM")), "rss_anon_mb": _mb(proc_kb("self", "RssAnon"))},
        "workers": workers,
        "first_batch_s": None if first_batch_s is None else round(first_batch_s, 3),
        "batches": args.batches,
        "batch_size": args.batch_size,
        "batches_s": round(batches_s, 3),
        "loader_stats": {
            "samples": stats.samples,
            "chunk_decodes": stats.chunk_decodes,
            "video_reads": stats.video_reads,
            "steps_reads": getattr(stats, "steps_reads", None),
            "footer_reads": getattr(stats, "footer_reads", None),
            "steps_indexed_reads": getattr(stats, "steps_indexed_reads", None),
            "steps_index_builds": getattr(stats, "steps_index_builds", None),
            "chunk_index_builds": getattr(stats, "chunk_index_builds", None),
        },
        "bytes_read": read["bytes"],
        "bytes_read_why": read["why"],
        "bytes_read_per_sample": None
        if read["bytes"] is None or not stats.samples
        else round(read["bytes"] / stats.samples, 1),
    }
    if args.catalog is not None:
        start = time.perf_counter()
        by_sql = pi_loader.Dataset(
            str(args.lake), sql="SELECT episode_id FROM episodes", catalog=str(args.catalog), **cache
        )
        result["open_sql_s"] = round(time.perf_counter() - start, 3)
        result["open_sql_episodes"] = len(by_sql.episode_ids)
    return result


def encoded_sizes(
    lake: Path, *, max_episodes: int = 200, seed: int = 0, contiguous: bool = False
) -> dict[str, Any]:
    """Encoded bytes per sample of a uniformly shuffled order: for every camera, the video row
    holding the sample's frame (`chunk_bytes`), and that row's bytes per frame (`frame_bytes`,
    the frame's share of an intra-only chunk). Averaged over every step of up to `max_episodes`
    episodes drawn at random (all of them when fewer; the first ones with `contiguous`)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    from pi_format.lake import LakeLayout, read_committed, read_visible

    layout = LakeLayout(str(lake))
    committed = read_committed(layout, ["attempt_id", "cameras", "steps_file", "video_file"])
    ids = sorted(committed.column("episode_id").to_pylist())
    count = min(max_episodes, len(ids))
    # contiguous ids sit in one data file (cheap on a big lake where every episode is the same)
    chosen = ids[:count] if contiguous else sorted(random.Random(seed).sample(ids, count))
    where = pc.field("episode_id").isin(chosen)
    chosen_rows = committed.filter(pc.is_in(committed.column("episode_id"), pa.array(chosen)))
    if chosen_rows.column("video_file").null_count == 0:
        # read only the files the chosen episodes' locators name: a filter through delta-rs reads
        # every video file first (the whole table, ~12 GB of memory at 100,000 episodes)
        attempts = pc.field("attempt_id").isin(chosen_rows.column("attempt_id").to_pylist())
        steps = _read_files(
            layout.table("steps"),
            chosen_rows.column("steps_file"),
            ["episode_id", "camera_frame_index"],
            where & attempts,
        )
        video = _read_files(
            layout.table("video"),
            chosen_rows.column("video_file"),
            ["episode_id", "camera", "first_frame", "frame_count", "data"],
            where & attempts,
        )
    else:  # a lake older than the locators
        steps = read_visible(layout, "steps", ["episode_id", "camera_frame_index"], filters=where)
        video = read_visible(
            layout, "video", ["episode_id", "camera", "first_frame", "frame_count", "data"], filters=where
        )
    sizes = pc.binary_length(video.column("data")).to_pylist()
    rows: dict[tuple[str, str], list[tuple[int, int, int]]] = {}
    for e, cam, first, count, size in zip(
        video.column("episode_id").to_pylist(),
        video.column("camera").to_pylist(),
        video.column("first_frame").to_pylist(),
        video.column("frame_count").to_pylist(),
        sizes,
        strict=True,
    ):
        rows.setdefault((e, cam), []).append((first, count, size))
    firsts = {key: [c[0] for c in sorted(chunks)] for key, chunks in rows.items()}
    for chunks in rows.values():
        chunks.sort()
    ids_all, cams_all = committed.column("episode_id").to_pylist(), committed.column("cameras").to_pylist()
    cameras = dict(zip(ids_all, cams_all, strict=True))
    chunk_total = frame_total = 0.0
    samples = 0
    for e, frames in zip(
        steps.column("episode_id").to_pylist(), steps.column("camera_frame_index").to_pylist(), strict=True
    ):
        samples += 1
        for cam, frame in zip(cameras[e], frames, strict=True):
            k = int(np.searchsorted(firsts[(e, cam)], frame, side="right")) - 1
            _, count, size = rows[(e, cam)][k]
            chunk_total += size
            frame_total += size / count
    return {
        "episodes_averaged": len(chosen),
        "samples_averaged": samples,
        "chunk_bytes_per_sample": round(chunk_total / max(samples, 1), 1),
        "frame_bytes_per_sample": round(frame_total / max(samples, 1), 1),
    }


def _read_files(table_root: str, files: Any, columns: list[str], where: Any) -> Any:
    """The rows matching `where` of the distinct data files `files` (relative to `table_root`)."""
    import pyarrow.dataset as pads

    paths = sorted({f"{table_root.rstrip('/')}/{name}" for name in files.to_pylist()})
    return pads.dataset(paths, format="parquet").to_table(columns=columns, filter=where)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--lake", type=Path, required=True)
    parser.add_argument("--catalog", type=Path, default=None)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batches", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--horizon", type=int, default=10)
    parser.add_argument("--chunk-cache", type=int, default=64)
    parser.add_argument("--episode-cache", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--spawned-at", type=float, default=None, help="(passed by run_leg; unused)")
    args = parser.parse_args()
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    report(probe(args))


if __name__ == "__main__":
    main()
