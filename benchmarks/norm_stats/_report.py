"""The report: the machine, the table printed, the plot."""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.norm_stats._data import DIMS
from benchmarks.norm_stats._legs import timed

TARGET_RANK_ERROR = 0.01
TARGET_MERGE_MS = 100.0


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
