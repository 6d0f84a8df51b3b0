"""Compaction's effect on a streamed lake: files, Delta log, Dataset open, loader throughput.

    .venv/bin/python -m benchmarks.lifecycle.compaction --episodes 2000 --group 16 --out DIR

Builds a lake as the stream job leaves it (`_lake.build_lake`: N episodes committed through
`LakeWriter.commit_episodes` in group commits of G, raw rows included: one steps, video,
episodes and raw file per group commit; 224 px H.264 chunks and 100 steps per episode), measures
it, runs `pi_jobs.maintenance.compact` then `gc(GcConfig(retention_hours=0))` in a process of
their own (wall time, peak RSS), and measures it again, side by side in one run. Writes
`DIR/compaction.json` and `DIR/compaction.png` and prints a table.

Each measuring leg is a fresh process (`_probe.py`: open `pi_loader.Dataset`, then shuffled
batches of 32 from `Loader(num_workers=2)` with one camera) with $TMPDIR set by this script, so
the host indexes the loader keeps there are the leg's own. Per lake state, in this order:

* `cold_index`: a fresh index directory, the lake's pages in the page cache (just written);
* `warm` (x `--repeats`, medians reported): the same index directory again, fresh processes;
  the last also hashes the first `--digests` samples of the seeded order;
* `cold`: every file of the lake fsynced and dropped from the page cache
  (`posix_fadvise(DONTNEED)`, residency checked with `fincore`) and a fresh index directory.

How to read it: `warm` is the steady state of a trainer host (everything cached: it measures
CPU work, file counts and metadata, not the disk); `cold` adds the disk reads of a first
touch. `open_s` is the Dataset constructor alone (imports excluded); `samples_per_s` the
batches after the first `--warmup` ones; `bytes_read_per_sample` is `loader.stats()` (Parquet
footers and column chunks, summed over the workers). The machine is small and shared: compare
before/after within one run, and the CPU per sample beside samples/s.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.lifecycle._lake import LakeSpec, build_lake, drop_pages, table_figures
from benchmarks.loader._timing import RESULT_PREFIX

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
TABLES = ("steps", "video", "episodes", "raw")


def run_module(module: str, argv: list[str], env: dict[str, str], timeout_s: float = 600) -> dict[str, Any]:
    """Run `python -m module argv` from the repository root; its result line, other lines echoed."""
    proc = subprocess.run(
        [sys.executable, "-m", module, *argv],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=timeout_s,
    )
    result: dict[str, Any] | None = None
    for line in proc.stdout.splitlines():
        if line.startswith(RESULT_PREFIX):
            result = json.loads(line[len(RESULT_PREFIX) :])
        else:
            print(line, flush=True)
    if proc.returncode != 0 or result is None:
        raise RuntimeError(f"{module} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return result


def measure_state(
    lake: Path, camera: str, args: argparse.Namespace, work: Path, label: str
) -> dict[str, Any]:
    """The legs of one lake state (see the module docstring) and their summary."""
    probe = [
        "--lake", str(lake), "--camera", camera, "--seed", str(args.seed),
        "--batches", str(args.batches), "--warmup", str(args.warmup),
    ]  # fmt: skip
    index_dir = Path(tempfile.mkdtemp(prefix=f"{label}-index-", dir=work))
    env = {**os.environ, "TMPDIR": str(index_dir), "PYTHONPATH": str(ROOT)}

    def leg(name: str, extra: list[str], leg_env: dict[str, str]) -> dict[str, Any]:
        result = run_module("benchmarks.lifecycle._probe", probe + extra, leg_env)
        print(
            f"  {label} {name}: open {result['open_s']:.3f} s, {result['samples_per_s']:.0f} samples/s, "
            f"{result['loader_stats']['bytes_read_per_sample']:.0f} B/sample",
            flush=True,
        )
        return {"leg": name, **result}

    legs = [leg("cold_index", [], env)]
    for r in range(args.repeats):
        last = r == args.repeats - 1
        legs.append(leg("warm", ["--digests", str(args.digests)] if last else [], env))
    dropped = drop_pages(lake)
    cold_dir = Path(tempfile.mkdtemp(prefix=f"{label}-cold-index-", dir=work))
    legs.append({**leg("cold", [], {**env, "TMPDIR": str(cold_dir)}), "pages_dropped": dropped})
    warm = [x for x in legs if x["leg"] == "warm"]
    digests = warm[-1].pop("digests")

    def med(key: str, rows: list[dict[str, Any]]) -> float:
        return round(statistics.median(row[key] for row in rows), 4)

    summary = {
        "open_s_warm": med("open_s", warm),
        "open_s_cold_index": legs[0]["open_s"],
        "open_s_cold": legs[-1]["open_s"],
        "samples_per_s_warm": med("samples_per_s", warm),
        "samples_per_s_cold_index": legs[0]["samples_per_s"],
        "samples_per_s_cold": legs[-1]["samples_per_s"],
        "cpu_ms_per_sample_warm": med("cpu_ms_per_sample", warm),
        "bytes_read_per_sample_warm": round(
            statistics.median(x["loader_stats"]["bytes_read_per_sample"] for x in warm), 1
        ),
        "bytes_read_per_sample_cold": legs[-1]["loader_stats"]["bytes_read_per_sample"],
        "first_batch_s_cold": legs[-1]["first_batch_s"],
    }
    return {"summary": summary, "legs": legs, "digests": digests}


def first_camera(lake: Path) -> str:
    from deltalake import DeltaTable

    cameras = DeltaTable(str(lake / "episodes")).to_pyarrow_table(columns=["cameras"])["cameras"]
    return str(cameras[0][0].as_py())


def machine() -> dict[str, Any]:
    with open("/proc/meminfo") as f:
        mem = next((line.split()[1] for line in f if line.startswith("MemTotal")), "0")
    return {
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "mem_total_gb": round(int(mem) / 2**20, 1),
        "load_average_start": [round(x, 2) for x in os.getloadavg()],
    }


ROWS: tuple[tuple[str, str, str], ...] = (
    ("steps files", "files", "steps"),
    ("video files", "files", "video"),
    ("episodes files", "files", "episodes"),
    ("raw files", "files", "raw"),
    ("data MB, all tables", "data_mb", ""),
    ("data MB, video", "table_mb", "video"),
    ("data MB, steps", "table_mb", "steps"),
    ("data MB, raw", "table_mb", "raw"),
    ("Delta log (kB, all tables)", "log_kb", ""),
    ("Delta log files", "log_files", ""),
    ("open s, warm (median)", "summary", "open_s_warm"),
    ("open s, cold index", "summary", "open_s_cold_index"),
    ("open s, cold pages + index", "summary", "open_s_cold"),
    ("samples/s, warm (median)", "summary", "samples_per_s_warm"),
    ("samples/s, cold index", "summary", "samples_per_s_cold_index"),
    ("samples/s, cold pages + index", "summary", "samples_per_s_cold"),
    ("CPU ms/sample, warm", "summary", "cpu_ms_per_sample_warm"),
    ("bytes read/sample, warm", "summary", "bytes_read_per_sample_warm"),
    ("bytes read/sample, cold", "summary", "bytes_read_per_sample_cold"),
)


def row_value(state: dict[str, Any], kind: str, key: str) -> float | None:
    layout = state["layout"]
    if kind == "files":
        table = layout["tables"].get(key)
        return None if table is None else table["active_files"]
    if kind == "table_mb":
        table = layout["tables"].get(key)
        return None if table is None else round(table["data_bytes"] / 1e6, 2)
    if kind == "data_mb":
        return round(layout["totals"]["data_bytes"] / 1e6, 1)
    if kind == "log_kb":
        return round(layout["totals"]["log_bytes"] / 1e3, 1)
    if kind == "log_files":
        return layout["totals"]["log_files"]
    value = state["summary"][key]
    return None if value is None else float(value)


def comparison(before: dict[str, Any], after: dict[str, Any]) -> list[dict[str, Any]]:
    """Before and after per metric; `after_over_before` for counts and sizes only. A timing's
    before and after are legs of one state each, not interleaved repeats of both, so their
    ratio is not a figure that holds (benchmarks._figures) and is left out (None)."""
    out = []
    for label, kind, key in ROWS:
        b, a = row_value(before, kind, key), row_value(after, kind, key)
        timed = key.startswith(("open_s", "samples_per_s", "cpu_ms"))
        ratio = None if timed or a is None or not b else round(a / b, 3)
        out.append({"metric": label, "before": b, "after": a, "after_over_before": ratio, "timed": timed})
    return out


def print_table(rows: list[dict[str, Any]], maintenance: dict[str, Any]) -> None:
    def fmt(v: float | None) -> str:
        return "-" if v is None else f"{v:,.3f}".rstrip("0").rstrip(".") if v % 1 else f"{v:,.0f}"

    print(f"\n{'metric':<32} {'before':>12} {'after':>12} {'after/before':>13}")
    for r in rows:
        ratio = "-" if r["after_over_before"] is None else f"{r['after_over_before']:.2f}x"
        print(f"{r['metric']:<32} {fmt(r['before']):>12} {fmt(r['after']):>12} {ratio:>13}")
    rss = maintenance["peak_rss_mb"]
    print(
        f"\ncompact {maintenance['compact_s']:.1f} s, gc {maintenance['gc_s']:.1f} s; peak RSS "
        f"{rss['after_compact']:.0f} MB after compact, {rss['after_gc']:.0f} MB after gc "
        f"({rss['after_imports']:.0f} MB after imports)"
    )


def draw(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    before, after = results["before"], results["after"]
    panels: list[tuple[str, list[tuple[str, str, str]]]] = [
        ("data files per table", [(t, "files", t) for t in TABLES if t in before["layout"]["tables"]]),
        ("data on disk (MB)", [(t, "table_mb", t) for t in TABLES if t in before["layout"]["tables"]]),
        ("Delta log, all tables (kB)", [("log kB", "log_kb", "")]),
        ("Dataset open (s)", [
            ("warm", "summary", "open_s_warm"), ("cold index", "summary", "open_s_cold_index"),
            ("cold", "summary", "open_s_cold"),
        ]),
        ("loader samples/s (2 workers)", [
            ("warm", "summary", "samples_per_s_warm"), ("cold index", "summary", "samples_per_s_cold_index"),
            ("cold", "summary", "samples_per_s_cold"),
        ]),
        ("bytes read per sample", [
            ("warm", "summary", "bytes_read_per_sample_warm"),
            ("cold", "summary", "bytes_read_per_sample_cold"),
        ]),
    ]  # fmt: skip
    fig, grid = plt.subplots(2, 3, figsize=(15, 8.5))
    axes = list(grid.flat)
    width = 0.38
    for ax, (title, rows) in zip(axes, panels, strict=True):
        xs = range(len(rows))
        for shift, state, name, color in (
            (-width / 2, before, "before", "#c44e52"),
            (width / 2, after, "after", "#4c72b0"),
        ):
            values = [row_value(state, kind, key) or 0.0 for _, kind, key in rows]
            bars = ax.bar([x + shift for x in xs], values, width, label=name, color=color)
            ax.bar_label(bars, labels=[f"{v:,.0f}" if v >= 100 else f"{v:.3g}" for v in values], fontsize=7)
        ax.set_xticks(list(xs), [label for label, _, _ in rows])
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=8)
    spec, m = results["config"], results["maintenance"]
    fig.suptitle(
        f"compaction of {spec['episodes']:,} episodes in group commits of {spec['group']} "
        f"(compact {m['compact_s']:.1f} s, peak RSS {m['peak_rss_mb']['after_gc']:.0f} MB; "
        f"{results['machine']['cpu_count']} CPUs, load {results['machine']['load_average_start'][0]})",
        fontsize=11,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--episodes", type=int, default=2000)
    parser.add_argument("--group", type=int, default=16, help="episodes per group commit")
    parser.add_argument("--out", type=Path, default=HERE / "results")
    parser.add_argument("--lake", type=Path, default=None, help="where to build it (default OUT/lake)")
    parser.add_argument("--keep-lake", action="store_true")
    parser.add_argument("--size-px", type=int, default=224)
    parser.add_argument("--target-mb", type=int, default=128, help="CompactConfig.target_file_bytes")
    parser.add_argument("--small-mb", type=int, default=32, help="CompactConfig.small_group_bytes")
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3, help="warm legs per state")
    parser.add_argument("--digests", type=int, default=64, help="samples hashed before and after")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    spec = LakeSpec(episodes=args.episodes, group=args.group, size_px=args.size_px)
    args.out.mkdir(parents=True, exist_ok=True)
    lake = args.lake or args.out / "lake"
    work = Path(tempfile.mkdtemp(prefix="lifecycle-", dir=args.out))
    started = time.monotonic()
    results: dict[str, Any] = {"benchmark": "lifecycle.compaction", "machine": machine()}
    results["config"] = {
        **{k: getattr(spec, k) for k in ("episodes", "group", "templates", "size_px", "duration_s")},
        "batch_size": 32, "workers": 2, "cameras": 1, "action_horizon": 50,
        "batches": args.batches, "warmup_batches": args.warmup, "warm_repeats": args.repeats,
        "digests": args.digests, "seed": args.seed,
        "target_file_bytes": args.target_mb << 20, "small_group_bytes": args.small_mb << 20,
    }  # fmt: skip
    results["legs_explained"] = {
        "warm": "fresh process; host index directory already built; lake pages in the page cache",
        "cold_index": "fresh process; empty host index directory; lake pages in the page cache",
        "cold": "fresh process; empty host index directory; every lake file fsynced and dropped "
        "from the page cache with posix_fadvise(DONTNEED) just before (cold-ish: the disk's own "
        "cache stays); see pages_dropped for residency before/after",
    }
    try:
        print(f"building {spec.episodes} episodes in groups of {spec.group} at {lake}", flush=True)
        results["build"] = build_lake(lake, spec)
        camera = first_camera(lake)
        results["config"]["camera"] = camera
        before = {"layout": table_figures(lake), **measure_state(lake, camera, args, work, "before")}
        print("compacting", flush=True)
        maintenance = run_module(
            "benchmarks.lifecycle._maintain",
            ["--lake", str(lake), "--target-mb", str(args.target_mb), "--small-mb", str(args.small_mb)],
            {**os.environ, "PYTHONPATH": str(ROOT)},
        )
        after = {"layout": table_figures(lake), **measure_state(lake, camera, args, work, "after")}
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if not args.keep_lake:
            shutil.rmtree(lake, ignore_errors=True)
    same = [b == a for b, a in zip(before.pop("digests"), after.pop("digests"), strict=True)]
    results.update(before=before, after=after, maintenance=maintenance)
    results["samples_identical"] = {"checked": len(same), "identical": sum(same), "all": all(same)}
    results["comparison"] = comparison(before, after)
    results["machine"]["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    results["wall_s"] = round(time.monotonic() - started, 1)
    (args.out / "compaction.json").write_text(json.dumps(results, indent=2) + "\n")
    draw(results, args.out / "compaction.png")
    print_table(results["comparison"], maintenance)
    print(f"samples identical before/after: {sum(same)}/{len(same)}; wrote {args.out}/compaction.json, .png")
    assert all(same), f"samples differ after compaction: {len(same) - sum(same)} of {len(same)}"


if __name__ == "__main__":
    main()
