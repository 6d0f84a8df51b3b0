"""Compaction's effect on a streamed lake: files, Delta log, Dataset open, loader throughput.

    .venv/bin/python -m benchmarks.lifecycle.compaction --episodes 2000 --group 16 --repeats 5 --out DIR

Builds a lake as the stream job leaves it (`_lake.build_lake`: N episodes committed through
`LakeWriter.commit_episodes` in group commits of G, raw rows included: one steps, video,
episodes and raw file per group commit; 224 px H.264 chunks and 100 steps per episode), copies
it, and runs `pi_jobs.maintenance.compact` then `gc(GcConfig(retention_hours=0))` on the copy in
a process of their own (wall time, peak RSS). The two lakes, "before" and "after", then sit side
by side and are measured in one run, the two states interleaved (`benchmarks._figures`): each
of `--repeats` (>= 3) repeats measures both, the order rotated each repeat (before, after;
after, before; ...), so a ratio after / before compares legs that ran back to back under the
same load. Writes `DIR/compaction.json` and `DIR/compaction.png` and prints a table.

Each measuring leg is a fresh process (`_probe.py`: open `pi_loader.Dataset`, then shuffled
batches of 32 from `Loader(num_workers=2)` with one camera) with $TMPDIR set by this script, so
the host indexes the loader keeps there are the leg's own. First, per state, an untimed `prime`
leg builds the state's warm index directory and hashes the first `--digests` samples of the
seeded order (before and after must be identical). Then each repeat runs, per state:

* `cold_index`: every file of the lake read into the page cache first, a fresh index directory;
* `warm`: the state's primed index directory, fresh process, pages cached;
* `cold`: every file of the lake fsynced and dropped from the page cache
  (`posix_fadvise(DONTNEED)`, residency checked with `fincore`) and a fresh index directory.

How to read it: `warm` is the steady state of a trainer host (everything cached: it measures
CPU work, file counts and metadata, not the disk); `cold` adds the disk reads of a first
touch. `open_s` is the Dataset constructor alone (imports excluded); `samples_per_s` the
batches after the first `--warmup` ones, `samples_per_s_all` every batch from the first (a
fresh host builds a per-file index at a file's first touch: with a few large files every one is
touched by the first batch, with many small ones the builds spread over the pass, so the window
alone would flatter the compacted lake); `first_batch_s` from the loader's start;
`bytes_read_per_sample` is `loader.stats()` (Parquet
footers and column chunks, summed over the workers). Every timed figure is the median with its
spread (min–max) over the repeats, and `after_over_before` the median and spread of the
per-repeat ratios (`benchmarks._figures.ratio`); file counts, sizes and the Delta log are exact
(one number each). Issue 12 asks for file counts, open time and loader throughput before and
after and sets no threshold, so no target is judged. The machine is small and shared: compare
before/after within one run, and the CPU per sample beside samples/s.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks._figures import MIN_REPEATS, interleaved, ratio, spread, spread_of, text_of
from benchmarks.lifecycle._lake import LakeSpec, build_lake, drop_pages, lake_files, table_figures
from benchmarks.loader._timing import RESULT_PREFIX

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
TABLES = ("steps", "video", "episodes", "raw")
STATES = ("before", "after")
KINDS = ("cold_index", "warm", "cold")
# (figure, the probe's key, the sub-leg) of every timed figure, each a spread over the repeats
TIMED: tuple[tuple[str, str, str], ...] = (
    ("open_s_warm", "open_s", "warm"),
    ("open_s_cold_index", "open_s", "cold_index"),
    ("open_s_cold", "open_s", "cold"),
    ("samples_per_s_warm", "samples_per_s", "warm"),
    ("samples_per_s_cold_index", "samples_per_s", "cold_index"),
    ("samples_per_s_cold", "samples_per_s", "cold"),
    ("cpu_ms_per_sample_warm", "cpu_ms_per_sample", "warm"),
    ("cpu_ms_per_sample_cold", "cpu_ms_per_sample", "cold"),
    ("samples_per_s_all_warm", "samples_per_s_all", "warm"),
    ("samples_per_s_all_cold_index", "samples_per_s_all", "cold_index"),
    ("samples_per_s_all_cold", "samples_per_s_all", "cold"),
    ("first_batch_s_warm", "first_batch_s", "warm"),
    ("first_batch_s_cold_index", "first_batch_s", "cold_index"),
    ("first_batch_s_cold", "first_batch_s", "cold"),
    ("bytes_read_per_sample_warm", "bytes_read_per_sample", "warm"),
    ("bytes_read_per_sample_cold", "bytes_read_per_sample", "cold"),
)


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


def read_pages(lake: Path) -> int:
    """Read every file of the lake once, so its pages are in the page cache; the bytes read."""
    total = 0
    for path in lake_files(lake):
        with open(path, "rb", buffering=0) as f:
            while chunk := f.read(8 << 20):
                total += len(chunk)
    return total


class Prober:
    """Runs `_probe` legs on the two lakes, each in a fresh process with its own $TMPDIR."""

    def __init__(self, lakes: dict[str, Path], camera: str, args: argparse.Namespace, work: Path) -> None:
        self.lakes, self.args, self.work = lakes, args, work
        self.camera = camera
        self.warm_dirs = {s: Path(tempfile.mkdtemp(prefix=f"{s}-warm-index-", dir=work)) for s in lakes}

    def probe(
        self, state: str, index_dir: Path, extra: list[str], batches: int | None = None
    ) -> dict[str, Any]:
        args = self.args
        argv = [
            "--lake", str(self.lakes[state]), "--camera", self.camera, "--seed", str(args.seed),
            "--batches", str(batches or args.batches), "--warmup", str(args.warmup), *extra,
        ]  # fmt: skip
        env = {**os.environ, "TMPDIR": str(index_dir), "PYTHONPATH": str(ROOT)}
        return run_module("benchmarks.lifecycle._probe", argv, env)

    def prime(self, state: str) -> dict[str, Any]:
        """The untimed first leg of a state: builds its warm index directory, hashes samples."""
        result = self.probe(state, self.warm_dirs[state], ["--digests", str(self.args.digests)])
        print(
            f"  {state} prime: open {result['open_s']:.3f} s, {result['samples_per_s']:.0f} samples/s",
            flush=True,
        )
        return {"leg": "prime", "state": state, **result}

    def repeat(self, repeat: int, state: str) -> list[dict[str, Any]]:
        """The three legs of one state in one repeat (see the module docstring)."""
        lake, legs = self.lakes[state], []
        for kind in KINDS:
            extra: dict[str, Any] = {}
            if kind == "cold_index":
                extra["pages_read_mb"] = round(read_pages(lake) / 1e6, 1)
                index_dir = Path(tempfile.mkdtemp(prefix=f"{state}-r{repeat}-index-", dir=self.work))
            elif kind == "warm":
                index_dir = self.warm_dirs[state]
            else:
                extra["pages_dropped"] = drop_pages(lake)
                index_dir = Path(tempfile.mkdtemp(prefix=f"{state}-r{repeat}-cold-index-", dir=self.work))
            result = self.probe(state, index_dir, [])
            if index_dir != self.warm_dirs[state]:
                shutil.rmtree(index_dir, ignore_errors=True)
            print(
                f"  repeat {repeat} {state} {kind}: open {result['open_s']:.3f} s, "
                f"{result['samples_per_s']:.0f} samples/s, "
                f"{result['loader_stats']['bytes_read_per_sample']:.0f} B/sample",
                flush=True,
            )
            legs.append({"leg": kind, "state": state, "repeat": repeat, **extra, **result})
        return legs


def leg_value(leg: dict[str, Any], key: str) -> float:
    value = leg["loader_stats"][key] if key == "bytes_read_per_sample" else leg[key]
    return float(value)


def figures(legs: list[dict[str, Any]], repeats: int) -> dict[str, Any]:
    """Per state its timed figures as spreads; per figure the per-repeat after / before ratio."""
    by: dict[tuple[str, str], list[float]] = {}
    for name, key, kind in TIMED:
        for state in STATES:
            rows = sorted(
                (x for x in legs if x["state"] == state and x["leg"] == kind), key=lambda x: x["repeat"]
            )
            if len(rows) != repeats:
                raise RuntimeError(f"{state} {kind}: {len(rows)} legs, {repeats} repeats")
            by[(state, name)] = [leg_value(x, key) for x in rows]
    out: dict[str, Any] = {s: {} for s in STATES}
    out["after_over_before"] = {}
    for name, _, _ in TIMED:
        for state in STATES:
            out[state][name] = spread(by[(state, name)], what=f"{state} {name}").to_json()
        out["after_over_before"][name] = ratio(
            by[("after", name)], by[("before", name)], what=f"{name} after / before"
        ).to_json()
    return out


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
        "shared": "a shared machine: other work ran beside this benchmark (see the load averages); "
        "before and after are interleaved repeats so their ratio holds, absolute rates do not travel",
    }


# (label, kind, key): kind "files", "table_mb", "data_mb", "log_kb", "log_files" are exact layout
# figures; "timed" a key of TIMED, a spread per state with its after / before ratio
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
    ("open s, warm", "timed", "open_s_warm"),
    ("open s, cold index", "timed", "open_s_cold_index"),
    ("open s, cold pages + index", "timed", "open_s_cold"),
    ("samples/s, warm", "timed", "samples_per_s_warm"),
    ("samples/s, cold index", "timed", "samples_per_s_cold_index"),
    ("samples/s, cold pages + index", "timed", "samples_per_s_cold"),
    ("samples/s over all batches, warm", "timed", "samples_per_s_all_warm"),
    ("samples/s over all batches, cold index", "timed", "samples_per_s_all_cold_index"),
    ("samples/s over all batches, cold pages + index", "timed", "samples_per_s_all_cold"),
    ("first batch s, warm", "timed", "first_batch_s_warm"),
    ("first batch s, cold index", "timed", "first_batch_s_cold_index"),
    ("first batch s, cold pages + index", "timed", "first_batch_s_cold"),
    ("CPU ms/sample, warm", "timed", "cpu_ms_per_sample_warm"),
    ("CPU ms/sample, cold pages + index", "timed", "cpu_ms_per_sample_cold"),
    ("bytes read/sample, warm", "timed", "bytes_read_per_sample_warm"),
    ("bytes read/sample, cold", "timed", "bytes_read_per_sample_cold"),
)


def layout_value(layout: dict[str, Any], kind: str, key: str) -> float | None:
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
        return float(layout["totals"]["log_files"])
    raise ValueError(kind)


def comparison(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Before, after and after / before per metric: a number each for the exact layout figures,
    a spread each (median, min–max over the interleaved repeats) for the timed ones."""
    out = []
    for label, kind, key in ROWS:
        if kind == "timed":
            b, a = results["before"]["figures"][key], results["after"]["figures"][key]
            r = results["after_over_before"][key]
            out.append({"metric": label, "before": b, "after": a, "after_over_before": r, "timed": True})
            continue
        bn = layout_value(results["before"]["layout"], kind, key)
        an = layout_value(results["after"]["layout"], kind, key)
        rn = None if an is None or not bn else round(an / bn, 3)
        out.append({"metric": label, "before": bn, "after": an, "after_over_before": rn, "timed": False})
    return out


def print_table(rows: list[dict[str, Any]], maintenance: dict[str, Any]) -> None:
    def fmt(v: Any) -> str:
        if isinstance(v, dict):
            return text_of(v, "{:,.0f}" if abs(v["median"]) >= 1000 else "{:.3g}")
        return "-" if v is None else f"{v:,.3f}".rstrip("0").rstrip(".") if v % 1 else f"{v:,.0f}"

    print(f"\n{'metric':<48} {'before':>24} {'after':>24} {'after/before':>22}")
    for r in rows:
        ratio_ = r["after_over_before"]
        shown = text_of(ratio_, "{:.3f}") if isinstance(ratio_, dict) else fmt(ratio_)
        print(f"{r['metric']:<48} {fmt(r['before']):>24} {fmt(r['after']):>24} {shown:>22}")
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
    present = [t for t in TABLES if t in before["layout"]["tables"]]
    panels: list[tuple[str, list[tuple[str, str, str]]]] = [
        ("data files per table", [(t, "files", t) for t in present]),
        ("data on disk (MB)", [(t, "table_mb", t) for t in present]),
        ("Delta log, all tables (kB)", [("log kB", "log_kb", "")]),
        ("Dataset open (s)", [
            ("warm", "timed", "open_s_warm"), ("cold index", "timed", "open_s_cold_index"),
            ("cold", "timed", "open_s_cold"),
        ]),
        ("loader samples/s, 2 workers (after the warm-up batches)", [
            ("warm", "timed", "samples_per_s_warm"), ("cold index", "timed", "samples_per_s_cold_index"),
            ("cold", "timed", "samples_per_s_cold"),
        ]),
        ("loader samples/s, 2 workers (all batches)", [
            ("warm", "timed", "samples_per_s_all_warm"),
            ("cold index", "timed", "samples_per_s_all_cold_index"),
            ("cold", "timed", "samples_per_s_all_cold"),
        ]),
        ("first batch (s)", [
            ("warm", "timed", "first_batch_s_warm"), ("cold index", "timed", "first_batch_s_cold_index"),
            ("cold", "timed", "first_batch_s_cold"),
        ]),
        ("CPU ms per sample (after the warm-up)", [
            ("warm", "timed", "cpu_ms_per_sample_warm"), ("cold", "timed", "cpu_ms_per_sample_cold"),
        ]),
    ]  # fmt: skip
    fig, grid = plt.subplots(2, 4, figsize=(20, 8.5))
    width = 0.38
    for ax, (title, rows) in zip(list(grid.flat), panels, strict=True):
        xs = range(len(rows))
        for shift, state, name, color in (
            (-width / 2, before, "before", "#c44e52"),
            (width / 2, after, "after", "#4c72b0"),
        ):
            values, low, high = [], [], []
            for _, kind, key in rows:
                if kind == "timed":
                    s = spread_of(state["figures"][key])
                    assert s is not None
                    values.append(s.median)
                    low.append(s.median - s.low)
                    high.append(s.high - s.median)
                else:
                    values.append(layout_value(state["layout"], kind, key) or 0.0)
                    low.append(0.0)
                    high.append(0.0)
            timed = any(kind == "timed" for _, kind, _ in rows)
            bars = ax.bar(
                [x + shift for x in xs], values, width, label=name, color=color,
                yerr=[low, high] if timed else None, capsize=3 if timed else 0,
            )  # fmt: skip
            ax.bar_label(bars, labels=[f"{v:,.0f}" if v >= 100 else f"{v:.3g}" for v in values], fontsize=7)
        ax.set_xticks(list(xs), [label for label, _, _ in rows])
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=8)
    spec, m = results["config"], results["maintenance"]
    fig.suptitle(
        f"compaction of {spec['episodes']:,} episodes in group commits of {spec['group']} "
        f"(compact {m['compact_s']:.1f} s, peak RSS {m['peak_rss_mb']['after_gc']:.0f} MB); timed bars: "
        f"median and min–max of {spec['repeats']} interleaved repeats; {results['machine']['cpu_count']} "
        f"CPUs, shared, load {results['machine']['load_average_start'][0]}",
        fontsize=10,
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
    parser.add_argument("--keep-lake", action="store_true", help="keep OUT/lake and OUT/lake-compacted")
    parser.add_argument("--size-px", type=int, default=224)
    parser.add_argument("--target-mb", type=int, default=128, help="CompactConfig.target_file_bytes")
    parser.add_argument("--small-mb", type=int, default=32, help="CompactConfig.small_group_bytes")
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument(
        "--repeats", type=int, default=MIN_REPEATS, help=f"interleaved repeats, >= {MIN_REPEATS}"
    )
    parser.add_argument("--digests", type=int, default=64, help="samples hashed before and after")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.repeats < MIN_REPEATS:
        parser.error(f"--repeats must be >= {MIN_REPEATS} (a median with its spread)")
    spec = LakeSpec(episodes=args.episodes, group=args.group, size_px=args.size_px)
    args.out.mkdir(parents=True, exist_ok=True)
    lake = args.lake or args.out / "lake"
    lakes = {"before": lake, "after": lake.with_name(lake.name + "-compacted")}
    # the legs' $TMPDIR (host indexes, the workers' forkserver socket): short paths under the
    # system's temp directory, since a socket path longer than 107 bytes cannot be bound
    work = Path(tempfile.mkdtemp(prefix="pilake-lifecycle-"))
    started = time.monotonic()
    results: dict[str, Any] = {"benchmark": "lifecycle.compaction", "machine": machine()}
    results["config"] = {
        **{k: getattr(spec, k) for k in ("episodes", "group", "templates", "size_px", "duration_s")},
        "batch_size": 32, "workers": 2, "cameras": 1, "action_horizon": 50,
        "batches": args.batches, "warmup_batches": args.warmup, "repeats": args.repeats,
        "digests": args.digests, "seed": args.seed,
        "target_file_bytes": args.target_mb << 20, "small_group_bytes": args.small_mb << 20,
    }  # fmt: skip
    results["legs_explained"] = {
        "order": "both lakes exist side by side (the built one and a compacted copy); each repeat "
        "measures both states, the order rotated each repeat (benchmarks._figures.interleaved); per "
        "state cold_index, warm, cold in that order",
        "prime": "untimed, once per state before the repeats: builds the state's warm index "
        "directory and hashes the first samples of the seeded order",
        "warm": "fresh process; the state's index directory already built; lake pages in the page cache",
        "cold_index": "fresh process; empty host index directory; every lake file read into the page "
        "cache just before",
        "cold": "fresh process; empty host index directory; every lake file fsynced and dropped "
        "from the page cache with posix_fadvise(DONTNEED) just before (cold-ish: the disk's own "
        "cache stays); see pages_dropped for residency before/after",
    }
    results["targets"] = (
        "none: issue 12 asks to measure file counts, open time and loader throughput before and "
        "after compaction and sets no threshold"
    )
    try:
        print(f"building {spec.episodes} episodes in groups of {spec.group} at {lake}", flush=True)
        results["build"] = build_lake(lake, spec)
        camera = first_camera(lake)
        results["config"]["camera"] = camera
        if lakes["after"].exists():
            shutil.rmtree(lakes["after"])
        copying = time.perf_counter()
        shutil.copytree(lake, lakes["after"])
        results["build"]["copy_s"] = round(time.perf_counter() - copying, 1)
        print("compacting the copy", flush=True)
        maintenance = run_module(
            "benchmarks.lifecycle._maintain",
            [
                "--lake",
                str(lakes["after"]),
                "--target-mb",
                str(args.target_mb),
                "--small-mb",
                str(args.small_mb),
            ],
            {**os.environ, "PYTHONPATH": str(ROOT)},
        )
        layouts = {s: table_figures(lakes[s]) for s in STATES}
        prober = Prober(lakes, camera, args, work)
        primes = {s: prober.prime(s) for s in STATES}
        legs: list[dict[str, Any]] = []
        for repeat, state in interleaved(STATES, args.repeats):
            legs += prober.repeat(repeat, state)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if not args.keep_lake:
            for path in lakes.values():
                shutil.rmtree(path, ignore_errors=True)
    same = [
        b == a for b, a in zip(primes["before"].pop("digests"), primes["after"].pop("digests"), strict=True)
    ]
    figs = figures(legs, args.repeats)
    for state in STATES:
        results[state] = {
            "layout": layouts[state],
            "figures": figs[state],
            "prime": primes[state],
            "legs": [x for x in legs if x["state"] == state],
        }
    results["after_over_before"] = figs["after_over_before"]
    results["order"] = [f"{x['repeat']}:{x['state']}:{x['leg']}" for x in legs]
    results["maintenance"] = maintenance
    results["samples_identical"] = {"checked": len(same), "identical": sum(same), "all": all(same)}
    results["comparison"] = comparison(results)
    results["machine"]["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    results["wall_s"] = round(time.monotonic() - started, 1)
    (args.out / "compaction.json").write_text(json.dumps(results, indent=2) + "\n")
    draw(results, args.out / "compaction.png")
    print_table(results["comparison"], maintenance)
    print(
        f"samples identical before/after: {sum(same)}/{len(same)}; wrote {args.out}/compaction.json, .png "
        f"in {results['wall_s']:.0f} s"
    )
    assert all(same), f"samples differ after compaction: {len(same) - sum(same)} of {len(same)}"


if __name__ == "__main__":
    main()
