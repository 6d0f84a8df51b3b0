"""Normalization statistics benchmark (issue 13, item 5): mean, std, q01 and q99 of 10,000
episodes merged from their episodes rows, against the exact values and an exact full pass.

    python -m benchmarks.norm_stats.run --out DIR                 # 10,000 episodes of 300-3,000 steps
    python -m benchmarks.norm_stats.run --episodes 1000 --out DIR # quicker
    python -m benchmarks.norm_stats.run --kll /tmp/dsk --out DIR  # + a KLL leg (datasketches on that path)

Episodes are synthetic but shaped like a bimanual robot's (14 proprio + 14 action dimensions:
per arm 6 joints as smooth random walks around a per-episode pose, one wrist that barely moves
around 1.5708 rad, one joint with rare sensor spikes, one with heavy-tailed noise, a gripper at
exactly 0 or 1; actions are the next step's joints plus noise and binary gripper commands; 3% of
the episodes work at another pose, so the high quantiles sit in a few episodes, the case that
per-episode quantiles cannot merge). Each episode's row statistics come from the stream job's
own featurize code (`pi_jobs.stream.featurize._stats` → `pi_format.stats.episode_stat_columns`),
the rows are written to Parquet in row groups of 32 (a group commit) and read back as pi_loader
reads them, and `pi_format.stats.merge_norm_stats` merges them (what `Dataset.norm_stats()` calls).

Measured: merge time (best and median of --repeats; wall and CPU of the thread; decode, moments
and quantiles apart), bytes per episode of the sketches, the rank error of q01/q99 against the
exact quantiles of all steps (numpy over every value) and the worst-case bound, errors of mean
and std; for comparison the naive merge of per-episode quantiles (length-weighted mean of each
episode's q01/q99), fixed-edge histograms over the registry's range, an exact full pass in memory
(every step already decoded: a lower bound of any full pass) and one reading the steps from
Parquet (measured on --read-episodes episodes, scaled to all). Prints a table, writes
OUT/norm_stats.json and OUT/norm_stats.png.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pi_format import EPISODES_SCHEMA, STEPS_SCHEMA
from pi_format import stats as S
from pi_jobs.stream.featurize import _stats as featurize_stats

HERE = Path(__file__).resolve().parent
DIMS = 14  # per feature: 2 arms x (6 joints + gripper)
GROUP = 32  # episodes rows per row group (a group commit's markers)
HIST_BINS = 256
HIST_RANGE = (-6.2832, 6.2832)  # the aloha registry range (jobs/pi_jobs/stream/robots.toml)
TARGET_RANK_ERROR = 0.01
TARGET_MERGE_MS = 100.0


# -- data ------------------------------------------------------------------------------------


def episode(rng: np.random.Generator, steps: int, wild: bool) -> tuple[np.ndarray, np.ndarray]:
    """One episode's proprio and action, float32 [steps, 14] each (see the module doc)."""
    proprio = np.empty((steps, DIMS), dtype=np.float64)
    for arm in range(2):
        base = arm * 7
        pose = rng.normal([0.0, -0.6, 0.9, 0.0, 0.4, 0.0], 0.3)
        if wild:
            pose[1] += 1.2
        # smooth random walk: increments of 2-10 mrad per step, averaged over 20 steps
        noise = np.cumsum(rng.normal(0.0, rng.uniform(0.002, 0.01), (steps + 20, 6)), axis=0)
        vel = (noise[20:] - noise[:-20]) / 20.0 * 4.0
        proprio[:, base : base + 6] = pose + np.cumsum(vel, axis=0)
        # gripper: exactly open (1) or closed (0), a few switches
        switches = np.sort(rng.integers(0, steps, rng.integers(1, 5)))
        state = np.zeros(steps)
        for i, s in enumerate(switches):
            state[s:] = float((i + 1) % 2)
        proprio[:, base + 6] = state
    proprio[:, 5] = 1.5708 + rng.normal(0.0, 0.002, steps)  # a wrist that barely moves
    spikes = rng.random(steps) < 0.001  # rare sensor glitches on one joint
    proprio[spikes, 3] += rng.choice([-1, 1], spikes.sum()) * rng.uniform(1.0, 3.0, spikes.sum())
    proprio[:, 10] += rng.standard_t(2.0, steps) * 0.02  # heavy-tailed joint noise
    action = np.empty_like(proprio)
    action[:-1] = proprio[1:]
    action[-1] = proprio[-1]
    action += rng.normal(0.0, 0.005, action.shape)
    action[:, 6] = (rng.random(steps) < 0.5).astype(np.float64)  # binary gripper commands
    action[:, 13] = proprio[:, 13]
    return proprio.astype(np.float32), action.astype(np.float32)


def build(episodes: int, min_steps: int, max_steps: int, seed: int) -> dict[str, Any]:
    """Every episode's row statistics (through featurize), its exact values, per-episode
    quantiles (for the naive merge) and the time the statistics took per episode."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(min_steps, max_steps + 1, episodes)
    wild = rng.random(episodes) < 0.03
    total = int(lengths.sum())
    values = np.empty((2 * DIMS, total), dtype=np.float32)  # every step, dimension-major
    per_episode_q = np.empty((episodes, 2, 2 * DIMS))
    rows: list[dict[str, Any]] = []
    stats_s = 0.0
    at = 0
    for i, steps in enumerate(lengths):
        proprio, action = episode(rng, int(steps), bool(wild[i]))
        t0 = time.perf_counter()
        row = {
            "step_count": int(steps),
            **featurize_stats("proprio", proprio),
            **featurize_stats("action", action),
        }
        stats_s += time.perf_counter() - t0
        rows.append(row)
        both = np.concatenate([proprio, action], axis=1)
        values[:, at : at + steps] = both.T
        per_episode_q[i] = np.quantile(both, [0.01, 0.99], axis=0)
        at += int(steps)
        if (i + 1) % 1000 == 0:
            print(f"  built {i + 1}/{episodes} episodes", flush=True)
    fields = ["step_count"] + [n for n in EPISODES_SCHEMA.names if n.startswith(("proprio_", "action_"))]
    schema = pa.schema([EPISODES_SCHEMA.field(n) for n in fields])
    table = pa.Table.from_pylist(rows, schema=schema)
    return {
        "lengths": lengths,
        "values": values,
        "per_episode_q": per_episode_q,
        "table": table,
        "stats_ms_per_episode": 1e3 * stats_s / episodes,
    }


def cached_build(args: argparse.Namespace) -> dict[str, Any]:
    """`build`, or what an earlier run with the same arguments kept under --cache."""
    key = f"{args.episodes}-{args.min_steps}-{args.max_steps}-{args.seed}"
    where = None if args.cache is None else args.cache / key
    if where is not None and (where / "done").exists():
        print(f"  reusing {where}", flush=True)
        meta = json.loads((where / "meta.json").read_text())
        return {
            "lengths": np.load(where / "lengths.npy"),
            "values": np.load(where / "values.npy"),
            "per_episode_q": np.load(where / "per_episode_q.npy"),
            "table": pq.read_table(where / "episodes.parquet"),
            **meta,
        }
    built = build(args.episodes, args.min_steps, args.max_steps, args.seed)
    if where is not None:
        where.mkdir(parents=True, exist_ok=True)
        for name in ("lengths", "values", "per_episode_q"):
            np.save(where / f"{name}.npy", built[name])
        pq.write_table(built["table"], where / "episodes.parquet")
        (where / "meta.json").write_text(json.dumps({"stats_ms_per_episode": built["stats_ms_per_episode"]}))
        (where / "done").write_text("")
    return built


# -- measurements ----------------------------------------------------------------------------


def timed(fn: Any, repeats: int) -> dict[str, float]:
    walls, cpus = [], []
    for _ in range(repeats):
        w, c = time.perf_counter(), time.thread_time()
        fn()
        cpus.append(1e3 * (time.thread_time() - c))
        walls.append(1e3 * (time.perf_counter() - w))
    return {
        "best_ms": min(walls),
        "median_ms": statistics.median(walls),
        "cpu_best_ms": min(cpus),
        "cpu_median_ms": statistics.median(cpus),
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


# -- report ----------------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    """The machine and how busy it was: `sort_4m_float32_ms` (best of 3 sorts of 4M random
    float32) is a fixed workload to compare runs taken under different loads."""
    data = np.random.default_rng(0).random(4_000_000, dtype=np.float32)
    best = min(timed(lambda: np.sort(data), 1)["best_ms"] for _ in range(3))
    return {
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        "sort_4m_float32_ms": round(best, 1),
    }


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.8))
    times = result["times_ms"]
    labels = ["merge (sketches)", "full pass, in memory", "full pass, reading steps"]
    vals = [times["merge"]["best_ms"], times["full_pass_in_memory_ms"], times["full_pass_with_reads_ms"]]
    if result.get("kll"):
        labels.insert(1, "KLL k=200 merge")
        vals.insert(1, result["kll"]["merge_ms_scaled_to_all"])
    ax1.barh(labels, vals, color=["tab:green"] + ["tab:gray"] * (len(vals) - 1))
    ax1.set_xscale("log")
    ax1.axvline(TARGET_MERGE_MS, color="tab:red", ls="--", lw=1, label="target 100 ms")
    for i, v in enumerate(vals):
        ax1.text(v, i, f" {v:,.0f} ms", va="center", fontsize=8)
    ax1.set_xlabel("milliseconds (log)")
    ax1.set_title(f"mean/std/q01/q99 of {result['episodes']:,} episodes ({result['steps'] / 1e6:.1f}M steps)")
    ax1.legend(loc="lower right", fontsize=8)
    err = result["rank_error"]
    x = np.arange(2 * DIMS)
    for name, style in (("sketch", "o"), ("naive_per_episode", "x"), ("histogram", "^")):
        for q, color in (("q01", "tab:blue"), ("q99", "tab:orange")):
            ax2.scatter(
                x,
                np.maximum(err[name][q], 1e-7),
                marker=style,
                s=18,
                color=color,
                label=f"{name} {q}",
                alpha=0.8,
            )
    ax2.axhline(TARGET_RANK_ERROR, color="tab:red", ls="--", lw=1, label="target 1%")
    ax2.axhline(err["bound"], color="tab:green", ls=":", lw=1, label="sketch worst-case bound")
    ax2.set_yscale("log")
    ax2.set_xlabel("dimension (0-13 proprio, 14-27 action)")
    ax2.set_ylabel("rank error (log; 1e-7 = exact)")
    ax2.set_title("rank error of q01 / q99 against numpy over every step")
    ax2.legend(fontsize=7, ncol=2, loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--episodes", type=int, default=10_000)
    parser.add_argument("--min-steps", type=int, default=300)
    parser.add_argument("--max-steps", type=int, default=3000)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument(
        "--read-episodes", type=int, default=200, help="episodes whose steps are read from Parquet"
    )
    parser.add_argument("--kll", default=None, help="a path with datasketches (pip install --target PATH)")
    parser.add_argument("--kll-episodes", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--alt-grid", default="0.002,1.75", help="DELTA,RATIO of a second rank grid to compare ('' to skip)"
    )
    parser.add_argument(
        "--cache", type=Path, default=None, help="keep the built episodes here and reuse them (~2 GB)"
    )
    parser.add_argument("--out", type=Path, default=HERE / "results")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"machine": machine(), "episodes": args.episodes}
    print(f"building {args.episodes} episodes of {args.min_steps}-{args.max_steps} steps ...", flush=True)
    built = cached_build(args)
    values, table = built["values"], built["table"]
    result["steps"] = int(values.shape[1])
    result["stats_ms_per_episode_at_ingest"] = built["stats_ms_per_episode"]

    with tempfile.TemporaryDirectory() as tmp:
        rows_path = Path(tmp) / "episodes.parquet"
        pq.write_table(table, rows_path, row_group_size=GROUP, compression="snappy")
        columns = table.column_names
        t0 = time.perf_counter()
        rows = pq.read_table(rows_path, columns=columns)
        read_ms = 1e3 * (time.perf_counter() - t0)
        meta = pq.ParquetFile(rows_path).metadata
        sketch_disk = sum(
            meta.row_group(g).column(c).total_compressed_size
            for g in range(meta.num_row_groups)
            for c in range(meta.num_columns)
            if meta.schema.column(c).path.endswith("_sketch")
        )
        stats_disk = sum(
            meta.row_group(g).column(c).total_compressed_size
            for g in range(meta.num_row_groups)
            for c in range(meta.num_columns)
        )
        print("reading steps for the full-pass comparison ...", flush=True)
        read = full_pass_read(built, min(args.read_episodes, args.episodes), args.seed, Path(tmp))

    sketch_bytes = sum(len(rows.column(f"{k}_sketch")[0].as_py()) for k in ("proprio", "action"))
    result["bytes_per_episode"] = {
        "sketches": sketch_bytes,
        "sketches_on_disk_mean": sketch_disk / args.episodes,
        "all_stat_columns_on_disk_mean": stats_disk / args.episodes,
        "m2_and_mean64": 2 * 2 * DIMS * 8,
    }
    merged = S.merge_norm_stats(rows)  # warm
    timings: dict[str, Any] = {
        "merge": timed(lambda: S.merge_norm_stats(rows), args.repeats),
        "moments_only": timed(lambda: S.merge_norm_stats(rows, quantiles=False), args.repeats),
        "decode": timed(
            lambda: S.decode_sketches(rows.column("proprio_sketch"), rows.column("action_sketch")),
            args.repeats,
        ),
    }
    sk = S.decode_sketches(rows.column("proprio_sketch"), rows.column("action_sketch"))
    timings["quantiles_only"] = timed(lambda: S.merge_quantiles(sk, S.NORM_QUANTILES), args.repeats)
    timings["read_rows_ms"] = read_ms
    print("exact full pass in memory ...", flush=True)
    t0 = time.perf_counter()
    exact = full_pass_in_memory(values)
    timings["full_pass_in_memory_ms"] = 1e3 * (time.perf_counter() - t0)
    timings["full_pass_read_ms_scaled"] = 1e3 * read["s_per_step"] * values.shape[1]
    timings["full_pass_with_reads_ms"] = (
        timings["full_pass_read_ms_scaled"] + timings["full_pass_in_memory_ms"]
    )
    result["times_ms"] = timings
    result["full_pass_read_sample"] = read

    got = {
        name: np.concatenate([getattr(merged["proprio"], name), getattr(merged["action"], name)])
        for name in ("mean", "std", "q01", "q99")
    }
    lengths = built["lengths"].astype(np.float64)
    naive = (lengths[:, None, None] * built["per_episode_q"]).sum(axis=0) / lengths.sum()
    print("rank errors ...", flush=True)
    err: dict[str, Any] = {"bound": S.rank_error_bound(0.01, args.episodes, values.shape[1])}
    for name, q01, q99 in (
        ("sketch", got["q01"], got["q99"]),
        ("naive_per_episode", naive[0], naive[1]),
        ("histogram", histogram_quantiles(values, 0.01), histogram_quantiles(values, 0.99)),
    ):
        err[name] = {
            "q01": rank_errors(values, q01, 0.01).tolist(),
            "q99": rank_errors(values, q99, 0.99).tolist(),
        }
        err[name]["max"] = max(max(err[name]["q01"]), max(err[name]["q99"]))
        err[name]["mean"] = float(np.mean(err[name]["q01"] + err[name]["q99"]))
    spread = exact["q99"] - exact["q01"]
    result["rank_error"] = err
    result["value_error_over_q99_minus_q01"] = {
        "q01_max": float(np.max(np.abs(got["q01"] - exact["q01"]) / spread)),
        "q99_max": float(np.max(np.abs(got["q99"] - exact["q99"]) / spread)),
        "naive_q99_max": float(np.max(np.abs(naive[1] - exact["q99"]) / spread)),
    }
    result["moments_error"] = {
        "mean_max_abs_over_std": float(np.max(np.abs(got["mean"] - exact["mean"]) / exact["std"])),
        "std_max_rel": float(np.max(np.abs(got["std"] - exact["std"]) / exact["std"])),
    }
    worst = int(np.argmax(np.abs(naive[1] - exact["q99"]) / spread))
    result["naive_q99_worst_dim"] = {
        "dim": worst,
        "exact": float(exact["q99"][worst]),
        "naive": float(naive[1][worst]),
        "sketch": float(got["q99"][worst]),
    }
    if args.alt_grid:
        print("other rank grid ...", flush=True)
        delta, ratio = (float(v) for v in args.alt_grid.split(","))
        result["alt_grid"] = alt_grid_leg(built, delta, ratio, args.repeats)
    if args.kll:
        print("KLL leg ...", flush=True)
        result["kll"] = kll_leg(args.kll, built["lengths"], min(args.kll_episodes, args.episodes))
    result["targets"] = {
        "rank_error_at_most_1pct": err["sketch"]["max"] <= TARGET_RANK_ERROR,
        "merge_under_100ms": timings["merge"]["best_ms"] < TARGET_MERGE_MS,
    }
    print_table(result)
    (args.out / "norm_stats.json").write_text(json.dumps(result, indent=2, default=float))
    plot(result, args.out / "norm_stats.png")
    print(f"wrote {args.out / 'norm_stats.json'} and {args.out / 'norm_stats.png'}")
    return 0


def print_table(r: dict[str, Any]) -> None:
    t, e = r["times_ms"], r["rank_error"]
    m = r["machine"]
    print(
        f"\n{r['episodes']:,} episodes, {r['steps']:,} steps, 28 dims; {m['cpus']} CPUs, load "
        f"{m['load_average_at_start']}, sorting 4M float32 {m['sort_4m_float32_ms']} ms"
    )
    print(
        f"  merge (mean/std/min/max/q01/q99, both features): best {t['merge']['best_ms']:.1f} ms, "
        f"median {t['merge']['median_ms']:.1f} ms (CPU best {t['merge']['cpu_best_ms']:.1f} ms)"
    )
    print(
        f"    of which decode {t['decode']['best_ms']:.1f} ms, "
        f"quantiles {t['quantiles_only']['best_ms']:.1f} ms, "
        f"moments only {t['moments_only']['best_ms']:.1f} ms; reading the rows {t['read_rows_ms']:.0f} ms"
    )
    print(
        f"  full pass in memory {t['full_pass_in_memory_ms'] / 1e3:.1f} s; with reading the steps "
        f"{t['full_pass_with_reads_ms'] / 1e3:.1f} s (no video decoded)"
    )
    b = r["bytes_per_episode"]
    print(
        f"  sketch bytes per episode {b['sketches']} ({b['sketches_on_disk_mean']:.0f} on disk); "
        f"featurize stats {r['stats_ms_per_episode_at_ingest']:.2f} ms/episode"
    )
    for name in ("sketch", "naive_per_episode", "histogram"):
        print(f"  rank error {name:18s} max {100 * e[name]['max']:.4f}%  mean {100 * e[name]['mean']:.4f}%")
    print(f"  worst-case bound of the sketch {100 * e['bound']:.3f}%")
    nv = r["naive_q99_worst_dim"]
    print(
        f"  q99 of dim {nv['dim']}: exact {nv['exact']:.4f}, sketch {nv['sketch']:.4f}, per-episode average "
        f"{nv['naive']:.4f}"
    )
    if r.get("alt_grid"):
        g = r["alt_grid"]
        print(
            f"  grid delta={g['delta']} ratio={g['ratio']}: {g['knots']} knots, "
            f"{g['sketch_bytes_per_episode']} B, "
            f"bound {100 * g['bound']:.2f}%, max rank error {100 * g['max_rank_error']:.4f}%, decode "
            f"{g['decode']['best_ms']:.1f} ms, quantiles {g['quantiles_only']['best_ms']:.1f} ms"
        )
    if r.get("kll"):
        k = r["kll"]
        print(
            f"  KLL k=200: merge {k['merge_ms_scaled_to_all']:.0f} ms "
            f"(scaled from {k['episodes']} episodes), "
            f"max rank error {100 * k['max_rank_error']:.3f}%, {k['mean_bytes_per_episode']:.0f} B/episode"
        )
    print(f"  targets: {r['targets']}")


if __name__ == "__main__":
    raise SystemExit(main())
