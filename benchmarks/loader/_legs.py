"""Legs that run in the project's venv, each in its own process (`run.py` spawns them).

    python -m benchmarks.loader._legs pi_loader --lake DIR --workers 2 --spawned-at T
    python -m benchmarks.loader._legs raw --lake DIR --workers 2 --spawned-at T
    python -m benchmarks.loader._legs ttfb --lake DIR --catalog DIR --workers 2 --spawned-at T

`pi_loader`: the public `pi_loader.Dataset` (action chunk via `action_horizon`), batched by
pi_loader's own `Loader` (`--api native`/`auto`, the default), by a torch
DataLoader with worker processes (`--api torch`: the Dataset's batches through `__getitems__`,
torch's collate), or by a torch DataLoader over the Loader's batches (`--api torch_batches`:
`pi_loader.adapters.torch_dataloader`); the order is pi_loader's seeded shuffle.
`raw`: the limit. The same video chunks held in memory as bytes, the same shuffled sample order
(`pi_loader.sample_order`, what `Dataset` uses), and for each sample and camera only decoding:
PyAV decodes the frame's chunk up to that frame (yuv420p, nothing kept; `--chunk-cache N`
instead decodes whole chunks into an LRU of N, pi_loader's way), then pi_format's vectorized
yuv420p->RGB, or with `--rgb24` FFmpeg's swscale (what pi_loader uses, so the limit). `workers`
processes each take whole batches; nothing but two counts comes back (no Delta, no IPC of
frames, no collation).
`ttfb`: a fresh process opens a dataset selected with SQL through the catalog and takes its
first batch.
"""

from __future__ import annotations

import argparse
import os
import time
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

_SPAWNED = time.monotonic()

from benchmarks.loader._timing import measure, report, shape_of  # noqa: E402

IMAGE_PREFIX = "observation.images."


def open_pi_loader(
    lake: str,
    *,
    workers: int,
    batch_size: int,
    horizon: int,
    seed: int,
    sql: str | None = None,
    catalog: str | None = None,
    api: str = "auto",
    lean: bool = False,
    block_size: int | None = None,
) -> tuple[Iterable[dict[str, Any]], int, str]:
    """pi_loader's batches of shuffled samples, the dataset's sample count, and the API used.

    The one place that knows pi_loader's API. `api="native"` (or "auto", the same) uses
    `pi_loader.Loader` with its own worker processes and defaults; "torch_batches" hands
    that Loader's batches out through a torch DataLoader (`adapters.torch_dataloader`); "torch"
    puts the public `Dataset` in a torch DataLoader (the order comes from the Dataset, so the
    DataLoader does not shuffle). `lean` shrinks what pi_loader keeps in memory (decoded-chunk
    and episode caches, batches in flight) to show that its peak memory follows configuration.
    `block_size` asks the native Loader for block shuffle (runs of neighbouring steps).
    """
    import pi_loader

    cache = 4 if lean else None
    if cache is None:
        ds = pi_loader.Dataset(lake, sql=sql, catalog=catalog, seed=seed, action_horizon=horizon)
    else:
        ds = pi_loader.Dataset(
            lake,
            sql=sql,
            catalog=catalog,
            seed=seed,
            action_horizon=horizon,
            chunk_cache_size=cache,
            episode_cache_size=cache,
        )
    native = pi_loader.Loader
    if block_size is not None:
        shard = pi_loader.ShardSpec(index=0, count=1)
        loader = native(ds, batch_size=batch_size, shard=shard, num_workers=workers, block_size=block_size)
        return loader, len(ds), f"pi_loader.Loader (block_size={block_size})"
    if api in ("native", "auto"):
        shard = pi_loader.ShardSpec(index=0, count=1)  # one host: the whole dataset
        if lean:
            loader = native(ds, batch_size=batch_size, shard=shard, num_workers=workers, prefetch_batches=1)
            return loader, len(ds), "pi_loader.Loader (prefetch_batches=1, chunk/episode caches 4)"
        loader = native(ds, batch_size=batch_size, shard=shard, num_workers=workers)
        return loader, len(ds), "pi_loader.Loader (its own worker processes, default settings)"
    if api == "torch_batches":
        from pi_loader.adapters import torch_dataloader

        shard = pi_loader.ShardSpec(index=0, count=1)
        batches = torch_dataloader(native(ds, batch_size=batch_size, shard=shard, num_workers=workers))
        return batches, len(ds), "pi_loader.adapters.torch_dataloader(pi_loader.Loader(...))"
    import torch

    torch_loader: Iterable[dict[str, Any]] = torch.utils.data.DataLoader(
        ds,  # type: ignore[arg-type]
        batch_size=batch_size,
        shuffle=False,
        num_workers=workers,
        persistent_workers=workers > 0,
        prefetch_factor=(1 if lean else 2) if workers > 0 else None,
    )
    return torch_loader, len(ds), "pi_loader.Dataset in a torch DataLoader" + (" (lean)" if lean else "")


def _check(batch: dict[str, Any]) -> dict[str, Any]:
    keys = [k for k in batch if k.startswith(IMAGE_PREFIX)] + ["observation.state", "action"]
    return {k: shape_of(batch[k]) for k in keys}


def _depth_reader(loader: Any) -> Any:
    """The native Loader's in-flight depth (LoaderStats.in_flight_depth); None for a torch one."""
    stats = getattr(loader, "stats", None)
    return None if stats is None else (lambda: stats().in_flight_depth)


def leg_pi_loader(args: argparse.Namespace) -> dict[str, Any]:
    if args.api.startswith(
        "torch"
    ):  # only the torch DataLoader legs need torch (its import is seconds on a GPU host)
        import torch

        torch.set_num_threads(1)
    if args.heap_trim is not None:  # before the open, which starts the workers' forkserver
        os.environ["PILAKE_LOADER_HEAP_TRIM"] = args.heap_trim
    if args.api == "torch":
        # A torch DataLoader forks its own workers: the Loader's forkserver, which a Dataset
        # warms as it opens, is never used on this path, and its one-off imports (~1-2 s of CPU
        # in its own process) would land in the measured window, a fixed cost spread over
        # however few samples a loaded machine delivers in it (pi_loader._processes.WARM_ENV).
        os.environ["PILAKE_LOADER_WARM_FORKSERVER"] = "0"
    loader, samples, api = open_pi_loader(
        str(args.lake),
        workers=args.workers,
        batch_size=args.batch_size,
        horizon=args.horizon,
        seed=args.seed,
        sql=args.sql,
        catalog=None if args.catalog is None else str(args.catalog),
        api=args.api,
        lean=args.lean,
        block_size=args.block_size,
    )
    opened = time.monotonic()
    result = measure(
        lambda: loader,
        batch_len=lambda b: len(b["action"]),
        spawned_at=args.spawned_at,
        opened_at=opened,
        warmup_batches=args.warmup_batches,
        measure_s=args.measure_s,
        check=_check,
        in_flight_depth=_depth_reader(loader),
    )
    result["dataset_samples"] = samples
    result["api"] = api
    if args.api == "torch":
        result["forkserver_warmed"] = False
    close = getattr(loader, "close", None)
    if close is not None:
        close()
    return result


# -- the raw decode limit ------------------------------------------------------------------------

# Filled before the pool forks, read by the workers (fork shares it copy-on-write).
_RAW: dict[str, Any] = {}
# Each worker's decoded chunks (yuv420p planes), LRU: the same bound pi_loader's workers keep.
_DECODED: OrderedDict[tuple[int, int, int], Any] = OrderedDict()


def _load_raw(lake: Path, seed: int, chunk_cache: int, rgb24: bool = False) -> int:
    import numpy as np
    from pi_loader import sample_order

    from benchmarks.loader._data import read_lake

    episodes = []
    for ep in read_lake(lake):  # sorted ids, steps in order: how pi_loader numbers samples
        per_camera = []
        for k, camera in enumerate(ep.cameras):
            cs = ep.chunks[camera]
            per_camera.append((np.array([c["first_frame"] for c in cs]), cs, k))
        episodes.append((ep.camera_frame_index, per_camera))
    lengths = np.array([len(e[0]) for e in episodes])
    total = int(lengths.sum())
    _RAW.update(
        episodes=episodes,
        offsets=np.concatenate([[0], np.cumsum(lengths)]),
        order=sample_order(total, seed=seed, epoch=0),  # pi_loader's own shuffled order
        chunk_cache=chunk_cache,
        rgb24=rgb24,
    )
    return total


def _decode_until(data: bytes, wanted: int, *, rgb24: bool = False) -> Any:
    """Frame `wanted` of a chunk, decoding no frame after it: yuv420p planes (h*3/2, w), or
    with `rgb24` RGB (h, w, 3) from PyAV's own (swscale) conversion."""
    from pi_format import VideoError
    from pi_format.video import ChunkDecoder

    decoder = ChunkDecoder(data)
    try:
        return decoder.rgb(wanted) if rgb24 else decoder.yuv(wanted)
    except VideoError as err:  # the benchmark reports a short chunk as its own failure
        raise RuntimeError(str(err)) from err


def _raw_batch(args: tuple[int, int]) -> tuple[int, int]:
    """Decode the frames of one batch; returns (samples, chunks decoded)."""
    import numpy as np
    from pi_format.video import ChunkDecoder, yuv420p_to_rgb

    batch, batch_size = args
    order, offsets, episodes = _RAW["order"], _RAW["offsets"], _RAW["episodes"]
    capacity = _RAW["chunk_cache"]
    indices = order[batch * batch_size : (batch + 1) * batch_size]
    decodes = 0
    for flat in indices:
        e = int(np.searchsorted(offsets, flat, side="right")) - 1
        step = int(flat - offsets[e])
        cfi, per_camera = episodes[e]
        for firsts, chunks, column in per_camera:
            frame = int(cfi[step, column])
            c = int(np.searchsorted(firsts, frame, side="right")) - 1
            chunk = chunks[c]
            offset = frame - chunk["first_frame"]
            if capacity == 0:  # the least decoding there is: up to the frame, nothing kept
                if _RAW["rgb24"]:  # the limit: FFmpeg's swscale conversion, as pi_loader does
                    _decode_until(chunk["data"], offset, rgb24=True)
                else:  # for comparison: pi_format's numpy conversion
                    yuv420p_to_rgb(_decode_until(chunk["data"], offset), chunk["height"], chunk["width"])
                decodes += 1
                continue
            # pi_loader's way: a lazy ChunkDecoder per chunk, kept in an LRU
            key = (e, column, c)
            decoder = _DECODED.get(key)
            if decoder is None:
                decoder = ChunkDecoder(chunk["data"])
                decodes += 1
                _DECODED[key] = decoder
                if len(_DECODED) > capacity:
                    _DECODED.popitem(last=False)
            else:
                _DECODED.move_to_end(key)
            decoder.rgb(offset)
    return len(indices), decodes


def leg_raw(args: argparse.Namespace) -> dict[str, Any]:
    import multiprocessing

    samples = _load_raw(args.lake, args.seed, args.chunk_cache, args.rgb24)
    batches = -(-samples // args.batch_size)
    pool = multiprocessing.get_context("fork").Pool(args.workers)
    opened = time.monotonic()
    decodes = [0, 0]  # samples, chunk decodes seen by the parent

    def count(result: tuple[int, int]) -> int:
        decodes[0] += result[0]
        decodes[1] += result[1]
        return result[0]

    def run() -> Iterator[tuple[int, int]]:
        return pool.imap(_raw_batch, [(b, args.batch_size) for b in range(batches)])

    try:
        result = measure(
            run,
            batch_len=count,
            spawned_at=args.spawned_at,
            opened_at=opened,
            warmup_batches=args.warmup_batches,
            measure_s=args.measure_s,
        )
    finally:
        pool.terminate()
    result["dataset_samples"] = samples
    result["chunk_cache"] = args.chunk_cache
    result["rgb"] = (
        "PyAV rgb24 (swscale)" if args.rgb24 or args.chunk_cache else "pi_format.video.yuv420p_to_rgb"
    )
    result["decoded_chunks_per_sample"] = round(decodes[1] / max(decodes[0], 1), 3)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("leg", choices=["pi_loader", "raw", "ttfb"])
    parser.add_argument("--lake", type=Path, required=True)
    parser.add_argument("--catalog", type=Path, default=None)
    parser.add_argument("--sql", default=None)
    parser.add_argument(
        "--api", choices=["auto", "native", "torch", "torch_batches"], default="auto", help="pi_loader legs"
    )
    parser.add_argument("--lean", action="store_true", help="pi_loader: small caches, one batch in flight")
    parser.add_argument(
        "--block-size", type=int, default=None, help="pi_loader: block shuffle (native Loader)"
    )
    parser.add_argument(
        "--heap-trim", default=None, help="pi_loader: PILAKE_LOADER_HEAP_TRIM for its workers ('off', or MB)"
    )
    parser.add_argument("--workers", type=int, required=True)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--horizon", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--chunk-cache",
        type=int,
        default=0,
        help="raw: 0 decodes each frame only up to itself, keeping nothing; N decodes whole chunks into "
        "an LRU of N per process (pi_loader's way; its default is 64)",
    )
    parser.add_argument(
        "--rgb24", action="store_true", help="raw: PyAV's rgb24 conversion instead of pi_format's numpy one"
    )
    parser.add_argument("--warmup-batches", type=int, default=3)
    parser.add_argument("--measure-s", type=float, default=10.0)
    parser.add_argument("--spawned-at", type=float, default=_SPAWNED)
    args = parser.parse_args()
    if args.leg == "raw":
        report(leg_raw(args))
    else:
        # ttfb is the pi_loader leg on a SQL selection, stopped after its first batch
        if args.leg == "ttfb" and args.sql is None:
            args.sql = "SELECT episode_id FROM episodes"
        report(leg_pi_loader(args))


if __name__ == "__main__":
    main()
