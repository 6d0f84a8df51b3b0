"""GPU (NVDEC) vs CPU decode of lake video chunks, at batch 32 and 128, at 224 px and higher
(issue 35 item 3): where does `pi_loader.decoding.NvdecDecoder` win?

One prepared command for a GPU host (it dry-runs the CPU legs anywhere):

    python -m benchmarks.gpu_host.decode --out DIR             # a GPU host: ~3 min
    python -m benchmarks.gpu_host.decode --quick --out DIR     # a dry run (CPU legs; GPU skipped)
    python -m benchmarks.gpu_host.decode --loader-only --out DIR   # the Loader legs alone

The raw decode legs below, then the Loader end to end with decoder="nvdec" vs "cpu" on a real
lake at 224 and 480 px (`benchmarks.gpu_host._loader_legs`, the `loader` object of the JSON).

1. Chunks as the lake writes them (`pi_format.video.encode_chunks`: intra-only H.264, 10 frames a
   chunk, the writer's x264 settings) of synthetic frames (a moving gradient over seeded texture),
   at each size (default 224x224 and 640x480).
2. Batches as a global shuffle asks for them: B seeded random (chunk, frame) pairs, each a
   fresh chunk decoder (no chunk reused between samples, as in the loader's common case).
3. Legs, interleaved repeat after repeat (`benchmarks._figures.interleaved`), each timed over
   `--measure-s` after one warm-up batch:
   - `cpu_pool`: the CPU path's decode limit: `--workers` processes (default: the loader's
     default, the cores less two), each decoding whole batches with PyAV into its own
     preallocated batch rows (`ChunkDecoder.rgb(out=...)`), nothing else (no I/O, no transfer:
     the most the CPU path can give);
   - `cpu_1`: one process doing the same (the per-core figure);
   - `gpu`: `NvdecDecoder.decode` of the whole batch into a CUDA tensor, synchronised (only
     where a GPU, a CUDA torch and PyNvVideoCodec are present; otherwise skipped, reason named).
   The CPU batches still need a host-to-device copy that the GPU's do not; it is not charged
   to the CPU here, so a GPU "win" is a win against the CPU path's best case.
4. `gpu_over_cpu_pool`: the per-repeat ratio, median and spread; the GPU wins at a (batch,
   height) only where the whole spread is above 1 (`judge`). Those pairs are what
   `pi_loader.decoding._options.GPU_WINS` should list for "auto" to pick NVDEC.

Writes DIR/gpu_decode.json and prints a table.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._figures import MIN_REPEATS, interleaved, judge, ratio, spread

ROOT = Path(__file__).resolve().parents[2]
CHUNK_FRAMES = 10

# -- chunks ----------------------------------------------------------------------------------


def make_chunks(width: int, height: int, count: int, seed: int = 0) -> list[bytes]:
    """`count` intra-only chunks of CHUNK_FRAMES frames at width x height, as the lake writes them."""
    from pi_format.video import encode_chunks

    rng = np.random.default_rng(seed)
    texture = rng.integers(0, 48, (height, width, 3), dtype=np.int32)
    ys, xs = np.mgrid[0:height, 0:width]
    frames = []
    for i in range(count * CHUNK_FRAMES):
        base = (xs * 3 + ys * 2 + i * 7) % 200
        rgb = np.stack((base, (base + 64) % 256, 255 - base), axis=-1) + texture
        frames.append(np.clip(rgb, 0, 255).astype(np.uint8))
    chunks = encode_chunks(
        frames, width=width, height=height, fps=15.0, chunk_frames=CHUNK_FRAMES, keyframe_interval=1
    )
    return [c.data for c in chunks]


def batch_plan(chunks: int, batch: int, batches: int, seed: int) -> list[list[tuple[int, int]]]:
    """`batches` batches of `batch` seeded random (chunk, frame) pairs."""
    rng = np.random.default_rng(seed)
    pairs = np.stack(
        (rng.integers(0, chunks, batches * batch), rng.integers(0, CHUNK_FRAMES, batches * batch)), axis=1
    )
    return [[(int(c), int(f)) for c, f in pairs[b * batch : (b + 1) * batch]] for b in range(batches)]


# -- CPU legs --------------------------------------------------------------------------------

_WORKER_CHUNKS: list[bytes] = []
_WORKER_OUT: dict[int, np.ndarray] = {}


def _worker_init(chunks: list[bytes]) -> None:
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    _WORKER_CHUNKS[:] = chunks


def decode_cpu(chunks: Sequence[bytes], pairs: Sequence[tuple[int, int]], out: np.ndarray) -> int:
    """Decode each (chunk, frame) with a fresh ChunkDecoder straight into `out`'s rows, as the
    loader's workers do; returns the frames decoded."""
    from pi_format.video import ChunkDecoder

    for row, (c, f) in enumerate(pairs):
        ChunkDecoder(chunks[c]).rgb(f, out[row])
    return len(pairs)


def _worker_decode(args: tuple[list[tuple[int, int]], int, int]) -> int:
    pairs, height, width = args
    out = _WORKER_OUT.get(len(pairs))
    if out is None or out.shape[1:3] != (height, width):
        out = _WORKER_OUT[len(pairs)] = np.empty((len(pairs), height, width, 3), np.uint8)
    return decode_cpu(_WORKER_CHUNKS, pairs, out)


class CpuPool:
    """`workers` spawned processes holding the chunks; each decodes whole batches, as the
    Loader's workers do (batch b goes to worker b % workers): one call hands every worker a
    batch, so the figure is the pool's throughput, not one batch's latency."""

    def __init__(self, chunks: list[bytes], workers: int) -> None:
        context = multiprocessing.get_context("spawn")  # this process may hold a CUDA context
        self.workers = workers
        self._pool = context.Pool(workers, initializer=_worker_init, initargs=(chunks,))

    def decode(self, pairs: list[tuple[int, int]], height: int, width: int) -> int:
        """Every worker decodes the batch `pairs` (its own fresh decoders): workers x batch frames."""
        return sum(self._pool.map(_worker_decode, [(pairs, height, width)] * self.workers, chunksize=1))

    def close(self) -> None:
        self._pool.close()
        self._pool.join()


def _timed(kind: str, batch: int, decode: Any, plan: list[list[tuple[int, int]]], measure_s: float) -> float:
    """samples/s of `decode(kind, batch, pairs)` over the plan's batches (cycled), after one
    warm-up batch."""
    decode(kind, batch, plan[0])
    started, samples, b = time.perf_counter(), 0, 1
    while True:
        samples += decode(kind, batch, plan[b % len(plan)])
        b += 1
        elapsed = time.perf_counter() - started
        if elapsed >= measure_s and b >= 3:
            return samples / elapsed


# -- main ------------------------------------------------------------------------------------


def _sizes(text: str) -> list[tuple[int, int]]:
    out = []
    for item in filter(None, text.split(",")):
        width, _, height = item.partition("x")
        out.append((int(width), int(height)))
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    from pi_loader.decoding import DecoderOptions, NvdecDecoder, gpu_unavailable_reason

    from benchmarks.gpu_host.run import machine

    missing = gpu_unavailable_reason() if not args.no_gpu else "--no-gpu"
    gpu = None
    if missing is None:
        # One device call should bring back the CPU legs even when NVDEC fails: probe it on a
        # small chunk first and record the failure instead of losing the run.
        try:
            gpu = NvdecDecoder(DecoderOptions(kind="nvdec"))
            _gpu_batch(gpu, make_chunks(64, 48, 1), [(0, 0), (0, 5)], 64, 48)
        except Exception as err:
            gpu, missing = None, f"NVDEC failed its probe: {type(err).__name__}: {err}"
            print(f"[gpu_decode] {missing}", flush=True)
    workers = args.workers or max((os.cpu_count() or 2) - 2, 1)
    batches = [int(b) for b in args.batches.split(",")]
    if not args.no_loader:
        import shutil
        import tempfile

        from benchmarks.gpu_host._loader_legs import measure_loader

        root = Path(tempfile.mkdtemp(prefix="gpu_decode_lakes_"))
        try:
            loader = measure_loader(
                root=root,
                sizes=[int(px) for px in args.loader_sizes.split(",")],
                batches=batches,
                workers=workers,
                repeats=args.repeats,
                measure_s=args.measure_s,
                episodes=args.loader_episodes,
                duration_s=args.loader_episode_s,
                gpu_missing=missing,
            )
        finally:
            shutil.rmtree(root, ignore_errors=True)
    if args.loader_only:
        args.sizes = ""
    result: dict[str, Any] = {
        "benchmark": "gpu_decode",
        "machine": machine(),
        "settings": {
            "sizes": args.sizes,
            "batches": batches,
            "workers": workers,
            "repeats": args.repeats,
            "measure_s": args.measure_s,
            "chunks": args.chunks,
            "chunk_frames": CHUNK_FRAMES,
            "quick": args.quick,
        },
        "gpu": "NVDEC (PyNvVideoCodec)" if gpu is not None else f"skipped: {missing}",
        "legs": {},
        "gpu_wins": [],
    }
    if not args.no_loader:
        result["loader"] = loader
    for width, height in _sizes(args.sizes):
        t = time.monotonic()
        chunks = make_chunks(width, height, args.chunks)
        took = time.monotonic() - t
        print(f"[gpu_decode] {width}x{height}: {len(chunks)} chunks in {took:.1f} s", flush=True)
        values = _measure_size(chunks, width, height, batches, workers, gpu, args)
        for b in batches:
            key = f"{width}x{height}_b{b}"
            entry: dict[str, Any] = {"width": width, "height": height, "batch": b}
            for kind in ("cpu_pool", "cpu_1", "gpu"):
                if (kind, b) in values:
                    entry[f"{kind}_samples_per_s"] = spread(values[(kind, b)], what=f"{key} {kind}").to_json()
            if gpu is not None:
                figure = ratio(values[("gpu", b)], values[("cpu_pool", b)], what=f"{key} gpu/cpu")
                entry["gpu_over_cpu_pool"] = figure.to_json()
                entry["gpu_wins"] = judge(figure, 1.0)
                if entry["gpu_wins"]["met"]:
                    result["gpu_wins"].append([b, height])
            result["legs"][key] = entry
    return result


def _measure_size(
    chunks: list[bytes],
    width: int,
    height: int,
    batches: list[int],
    workers: int,
    gpu: Any,
    args: argparse.Namespace,
) -> dict[tuple[str, int], list[float]]:
    """samples/s of each leg at each batch size, one value per repeat, legs interleaved."""
    pool = CpuPool(chunks, workers)
    one = {b: np.empty((b, height, width, 3), np.uint8) for b in batches}
    kinds = ("cpu_pool", "cpu_1") if gpu is None else ("cpu_pool", "cpu_1", "gpu")
    legs = [(kind, b) for b in batches for kind in kinds]
    values: dict[tuple[str, int], list[float]] = {leg: [] for leg in legs}
    plans = {b: batch_plan(len(chunks), b, 8, seed=b) for b in batches}

    def decode(kind: str, b: int, pairs: list[tuple[int, int]]) -> int:
        if kind == "cpu_pool":
            return pool.decode(pairs, height, width)
        if kind == "cpu_1":
            return decode_cpu(chunks, pairs, one[b])
        return _gpu_batch(gpu, chunks, pairs, width, height)

    try:
        for repeat, (kind, b) in interleaved(legs, args.repeats):
            rate = _timed(kind, b, decode, plans[b], args.measure_s)
            values[(kind, b)].append(rate)
            print(
                f"[gpu_decode] repeat {repeat} {width}x{height} b{b:<4d} {kind:8s} {rate:9.0f} samples/s",
                flush=True,
            )
    finally:
        pool.close()
    return values


def _gpu_batch(gpu: Any, chunks: list[bytes], pairs: list[tuple[int, int]], width: int, height: int) -> int:
    import torch

    gpu.decode([(chunks[c], f) for c, f in pairs], width=width, height=height, frame_count=CHUNK_FRAMES)
    torch.cuda.synchronize()
    return len(pairs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "gpu_host" / "results")
    parser.add_argument("--sizes", default="224x224,640x480", help="WxH,... (default: 224 px and 480p)")
    parser.add_argument("--batches", default="32,128")
    parser.add_argument("--workers", type=int, default=0, help="CPU decode processes (0: cores less two)")
    parser.add_argument("--repeats", type=int, default=MIN_REPEATS)
    parser.add_argument("--measure-s", type=float, default=2.0)
    parser.add_argument("--chunks", type=int, default=24, help="chunks per size (10 frames each)")
    parser.add_argument("--no-gpu", action="store_true", help="CPU legs only")
    parser.add_argument("--quick", action="store_true", help="a dry run: small sizes, short legs")
    parser.add_argument("--loader-sizes", default="224,480", help="px,... of the Loader legs' lakes")
    parser.add_argument("--loader-episodes", type=int, default=40, help="episodes per Loader lake")
    parser.add_argument("--loader-episode-s", type=float, default=4.0, help="seconds per episode")
    parser.add_argument("--no-loader", action="store_true", help="the raw decode legs only")
    parser.add_argument("--loader-only", action="store_true", help="the Loader legs only")
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.measure_s, args.chunks = "224x224,320x240", 0.3, 4
        args.loader_sizes, args.loader_episodes, args.loader_episode_s = "224,320", 6, 2.0
        args.workers = args.workers or 2
    started = time.monotonic()
    result = run(args)
    result["elapsed_s"] = round(time.monotonic() - started, 1)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "gpu_decode.json"
    path.write_text(json.dumps(result, indent=1))
    print(f"\n{'size/batch':18s} {'cpu_pool':>22s} {'cpu_1':>22s} {'gpu':>22s} {'gpu/cpu_pool':>22s}")
    for key, entry in result["legs"].items():
        cells = [_text(entry.get(f"{k}_samples_per_s")) for k in ("cpu_pool", "cpu_1", "gpu")]
        print(f"{key:18s} " + " ".join(f"{c:>22s}" for c in [*cells, _text(entry.get("gpu_over_cpu_pool"))]))
    print(f"GPU: {result['gpu']}; GPU wins at (batch, height): {result['gpu_wins'] or 'nowhere measured'}")
    if "loader" in result:
        print(f"\n{'Loader px/batch':18s} {'cpu':>22s} {'nvdec':>22s} {'nvdec/cpu':>22s}")
        for key, entry in result["loader"]["legs"].items():
            cells = [_text(entry.get(f"loader_{k}_samples_per_s")) for k in ("cpu", "nvdec")]
            print(f"{key:18s} " + " ".join(f"{c:>22s}" for c in [*cells, _text(entry.get("nvdec_over_cpu"))]))
        wins = result["loader"]["nvdec_wins"] or "nowhere measured"
        print(f"Loader NVDEC: {result['loader']['nvdec']}; wins at (batch, px): {wins}")
    print(f"wrote {path} in {result['elapsed_s']} s")
    return 0


def _text(node: dict[str, Any] | None) -> str:
    if not node:
        return "-"
    return f"{node['median']:.4g} ({node['min']:.4g}-{node['max']:.4g})"


if __name__ == "__main__":
    sys.exit(main())
