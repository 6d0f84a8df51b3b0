"""The measurements: timings, rank errors, and the comparison legs (histograms, full passes,
KLL, another rank grid)."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pi_format import STEPS_SCHEMA
from pi_format import stats as S

from benchmarks._figures import MIN_REPEATS, spread
from benchmarks.norm_stats._data import DIMS, episode

HIST_BINS = 256
HIST_RANGE = (-6.2832, 6.2832)  # the aloha registry range (jobs/pi_jobs/stream/robots.toml)


def timed(fn: Any, repeats: int) -> dict[str, Any]:
    """Wall and CPU milliseconds of `repeats` calls (CPU of the process: the merge runs its two
    tails on two threads): best and median, and `wall_ms`, the median with its spread
    (`benchmarks._figures`), which a target is judged on."""
    walls, cpus = [], []
    for _ in range(repeats):
        w, c = time.perf_counter(), time.process_time()
        fn()
        cpus.append(1e3 * (time.process_time() - c))
        walls.append(1e3 * (time.perf_counter() - w))
    return {
        "best_ms": min(walls),
        "median_ms": statistics.median(walls),
        "cpu_best_ms": min(cpus),
        "cpu_median_ms": statistics.median(cpus),
        "wall_ms": spread(walls, what="wall ms").to_json() if len(walls) >= MIN_REPEATS else None,
    }


def rank_errors(values: np.ndarray, estimates: np.ndarray, q: float) -> np.ndarray:
    """Per dimension: distance of q·N from the rank interval [#(< x), #(<= x)], over N."""
    n = values.shape[1]
    out = np.empty(values.shape[0])
    for d in range(values.shape[0]):
        x = np.float32(estimates[d])
        below = int(np.count_nonzero(values[d] < x))
        upto = int(np.count_nonzero(values[d] <= x))
        out[d] = max(0.0, below - q * n, q * n - upto) / n
    return out


def histogram_quantiles(values: np.ndarray, q: float) -> np.ndarray:
    """Quantiles from fixed-edge histograms over the registry's range (merging per-episode
    histograms is a sum, so the merged histogram is that of all values), interpolated in bins."""
    edges = np.linspace(*HIST_RANGE, HIST_BINS + 1)
    out = np.empty(values.shape[0])
    for d in range(values.shape[0]):
        counts = np.histogram(np.clip(values[d], *HIST_RANGE), bins=edges)[0]
        cum = np.cumsum(counts) / counts.sum()
        b = int(np.searchsorted(cum, q))
        before = cum[b - 1] if b else 0.0
        frac = (q - before) / max(cum[b] - before, 1e-300)
        out[d] = edges[b] + frac * (edges[b + 1] - edges[b])
    return out


def full_pass_in_memory(values: np.ndarray) -> dict[str, np.ndarray]:
    """Exact mean, std, q01, q99 of every step already in memory (a lower bound of a full pass)."""
    v = values.astype(np.float64)
    mean = v.mean(axis=1)
    std = v.std(axis=1)
    n = values.shape[1]
    lo, hi = int(np.ceil(0.01 * n)) - 1, n - int(np.ceil(0.01 * n))
    part = np.partition(values, [lo, hi], axis=1)
    return {
        "mean": mean,
        "std": std,
        "q01": part[:, lo].astype(np.float64),
        "q99": part[:, hi].astype(np.float64),
    }


def full_pass_read(built: dict[str, Any], episodes: int, seed: int, tmp: Path) -> dict[str, float]:
    """Read `episodes` episodes' steps from Parquet (one zstd row group per episode, as the lake's
    steps files) into arrays: seconds per step, to scale to the whole dataset."""
    rng = np.random.default_rng(seed + 1)
    lengths = built["lengths"][:episodes]
    path = tmp / "steps.parquet"
    writer = pq.ParquetWriter(path, STEPS_SCHEMA, compression="zstd")
    for i, steps in enumerate(lengths):
        proprio, action = episode(rng, int(steps), False)
        n = int(steps)
        writer.write_table(
            pa.Table.from_pydict(
                {
                    "episode_id": [f"ep-{i:06d}"] * n,
                    "attempt_id": ["a"] * n,
                    "step_index": np.arange(n, dtype=np.int32),
                    "timestamp_ns": np.arange(n, dtype=np.int64) * 20_000_000,
                    "proprio": pa.FixedSizeListArray.from_arrays(proprio.ravel(), DIMS).cast(
                        pa.list_(pa.float32())
                    ),
                    "action": pa.FixedSizeListArray.from_arrays(action.ravel(), DIMS).cast(
                        pa.list_(pa.float32())
                    ),
                    "camera_frame_index": pa.FixedSizeListArray.from_arrays(
                        np.zeros(3 * n, np.int32), 3
                    ).cast(pa.list_(pa.int32())),
                },
                schema=STEPS_SCHEMA,
            )
        )
    writer.close()
    best = float("inf")
    for _ in range(2):
        t0 = time.perf_counter()
        table = pq.read_table(path, columns=["proprio", "action"])
        for name in ("proprio", "action"):
            flat = table.column(name).combine_chunks().flatten().to_numpy()
            _ = flat.reshape(-1, DIMS).astype(np.float64).sum(axis=0)
        best = min(best, time.perf_counter() - t0)
    steps = int(lengths.sum())
    return {
        "episodes": episodes,
        "steps": steps,
        "seconds": best,
        "s_per_step": best / steps,
        "bytes": path.stat().st_size,
    }


KLL_SCRIPT = r"""
import json, sys, time
import numpy as np
import datasketches as ds
lengths = [int(x) for x in sys.argv[1].split(",")]
dims, k = int(sys.argv[2]), int(sys.argv[3])
rng = np.random.default_rng(0)
blobs, values = [], []
for n in lengths:
    x = (np.cumsum(rng.normal(0, 0.01, (n, dims)), axis=0) + rng.normal(0, 0.5, dims)).astype(np.float32)
    values.append(x)
    row = []
    for d in range(dims):
        s = ds.kll_floats_sketch(k)
        s.update(x[:, d])
        row.append(s.serialize())
    blobs.append(row)
t0 = time.perf_counter()
merged = [ds.kll_floats_sketch(k) for _ in range(dims)]
for row in blobs:
    for d in range(dims):
        merged[d].merge(ds.kll_floats_sketch.deserialize(row[d]))
q = [[m.get_quantile(0.01), m.get_quantile(0.99)] for m in merged]
seconds = time.perf_counter() - t0
allv = np.concatenate(values)
err = []
for d in range(dims):
    for j, p in enumerate((0.01, 0.99)):
        x = np.float32(q[d][j]); n = len(allv)
        below, upto = int((allv[:, d] < x).sum()), int((allv[:, d] <= x).sum())
        err.append(max(0.0, below - p * n, p * n - upto) / n)
print(json.dumps({"seconds": seconds, "bytes_per_episode": sum(len(b) for b in blobs[0]) * 1.0,
                  "mean_bytes_per_episode": sum(len(b) for r in blobs for b in r) / len(blobs),
                  "max_rank_error": max(err), "k": k, "episodes": len(lengths), "dims": dims}))
"""


def kll_leg(path: str, lengths: np.ndarray, episodes: int) -> dict[str, Any]:
    """Merge time and rank error of datasketches' KLL (k=200) on `episodes` random-walk episodes
    of the same lengths, in a subprocess with `path` (its own numpy) first on sys.path; the time
    is scaled to all episodes (a KLL merge costs the same per sketch)."""
    sub = ",".join(str(int(n)) for n in lengths[:episodes])
    env = dict(os.environ, PYTHONPATH=path)
    out = subprocess.run(
        [sys.executable, "-c", KLL_SCRIPT, sub, str(2 * DIMS), "200"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=1800,
    )
    got: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    got["merge_ms_scaled_to_all"] = 1e3 * got["seconds"] * len(lengths) / episodes
    return got


def alt_grid_leg(built: dict[str, Any], delta: float, ratio: float, repeats: int) -> dict[str, Any]:
    """The same episodes sketched on another rank grid (registered in this process only):
    knots, bytes, worst-case bound, measured rank error and quantile-merge time."""
    grid = S.SketchGrid(grid_id=250, delta=delta, ratio=ratio)
    S.GRIDS[grid.grid_id] = grid
    values, lengths = built["values"], built["lengths"]
    blobs: dict[str, list[bytes]] = {"proprio": [], "action": []}
    at = 0
    for n in lengths:
        episode_values = values[:, at : at + n].T
        blobs["proprio"].append(S.encode_sketch(episode_values[:, :DIMS], grid))
        blobs["action"].append(S.encode_sketch(episode_values[:, DIMS:], grid))
        at += int(n)
    columns = [pa.array(blobs[k], pa.binary()) for k in ("proprio", "action")]
    sk = S.decode_sketches(*columns)
    q01, q99 = S.merge_quantiles(sk, S.NORM_QUANTILES)
    errors = np.concatenate([rank_errors(values, q01, 0.01), rank_errors(values, q99, 0.99)])
    return {
        "delta": delta,
        "ratio": ratio,
        "knots": grid.knots,
        "sketch_bytes_per_episode": sum(len(blobs[k][0]) for k in blobs),
        "bound": S.rank_error_bound(0.01, len(lengths), values.shape[1], grid),
        "max_rank_error": float(errors.max()),
        "mean_rank_error": float(errors.mean()),
        "decode": timed(lambda: S.decode_sketches(*columns), repeats),
        "quantiles_only": timed(lambda: S.merge_quantiles(sk, S.NORM_QUANTILES), repeats),
    }
