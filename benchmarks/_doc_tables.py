"""The tables `benchmarks.render_docs` writes into the READMEs, one function per block, each a
pure function of the committed JSON under `benchmarks/baselines/` (and, for the normalization
statistics' bound, of `pi_format.stats.rank_error_bound`): nothing here is typed by hand.

A figure measured as a median with its spread reads "median (min–max)"; one committed before
that rule reads "value (why, needs rerun)" (`benchmarks._figures.text_of`), and a target is
met only when its whole spread clears it, so a legacy figure never reads as a pass.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks._doc_million import cold_open, million_notes
from benchmarks._figures import text_of
from benchmarks.copy._table import copy_table
from benchmarks.loader._doc_block import loader_cpu

Table = list[list[str]]
# Leg names of the loader benchmark's JSON (benchmarks/loader/_report.py LOADERS), as the table
# names them; a leg missing here is shown by its JSON name.
LOADER_LABELS = {
    "raw": "raw decode limit (intra-only H.264, swscale RGB)",
    "raw_cached": "raw decode limit, chunk decoders in an LRU",
    "raw_numpy": "raw decode limit, numpy yuv420p→RGB",
    "pi_loader": "pi_loader (`Loader`, global shuffle)",
    "pi_loader_lean": "pi_loader, lean caches",
    "pi_loader_block": "pi_loader, block shuffle of 10",
    "pi_loader_torch": "pi_loader `Dataset` in torch DataLoader",
    "lerobot": "LeRobotDataset v3 (AV1, torchcodec)",
    "mosaic": "Mosaic streaming (JPEG)",
}
VERDICT = {True: "met", False: "missed", None: "not measured"}
# steps per episode at which the rank-error bound is tabled (the benchmark's episodes: 300-3,000)
BOUND_STEPS = (50, 100, 300, 1_000, 1_650, 3_000, 10_000)


def markdown(header: list[str], rows: Table) -> str:
    """A Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _num(value: Any, fmt: str = "{:,.1f}") -> str:
    return "-" if value is None else fmt.format(value)


def _short(value: float | None) -> str:
    """4 significant digits, thousands as whole numbers."""
    if value is None:
        return "-"
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"


def _needs_rerun(doc: dict[str, Any]) -> str:
    note = doc.get("needs_rerun")
    if not note:
        return ""
    return f"\n\nNeeds a rerun: {', '.join(note['what'])} ({note['note']}; `{note['how']}`)."


def _load(machine: dict[str, Any]) -> str:
    if "load_average_at_end" in machine:
        return f"{machine['load_average_at_end'][0]:g} at the end"
    return str(machine.get("load_average_observed", "not recorded")).split(" (")[0] + " while it ran"


def loader(b: Path) -> str:
    doc = json.loads((b / "loader.json").read_text())
    legs: dict[str, dict[int, dict[str, Any]]] = {}
    if "figures" in doc:  # medians with their spread over the interleaved repeats
        for w, per in doc["figures"].items():
            for name, figures in per.items():
                legs.setdefault(name, {})[int(w)] = figures
    else:  # one run per leg (before the rule)
        for leg in doc["legs"]:
            legs.setdefault(leg["loader"], {})[int(leg["workers"])] = leg
    repeats = sorted({int(leg.get("repeat", 0)) for leg in doc["legs"]})
    rows = []
    for name, by_w in legs.items():
        one, two = by_w.get(1, {}), by_w.get(2, {})
        rows.append(
            [
                LOADER_LABELS.get(name, name),
                text_of(one.get("samples_per_s"), "{:,.0f}"),
                text_of(two.get("samples_per_s"), "{:,.0f}"),
                " / ".join(text_of(leg.get("cpu_ms_per_sample"), "{:.2f}") for leg in (one, two)),
                text_of(two.get("peak_memory_mb"), "{:,.0f}"),
            ]
        )
    table = markdown(
        ["loader", "1 worker", "2 workers", "CPU ms/sample (1 / 2)", "peak MB (2 workers)"], rows
    )
    r = doc["ratios"]
    first = doc["time_to_first_batch"]
    detail = doc.get("targets_detail", {})

    def verdict(name: str) -> str:
        judged = detail.get(name)
        found = (
            [d["verdict"] for d in judged] if isinstance(judged, list) else [(judged or {}).get("verdict")]
        )
        met = doc["targets"].get(name)
        return "undecided" if "undecided" in found and not met else VERDICT[met]

    targets = [
        f"≥5× LeRobot: {verdict('pi_loader >= 5x LeRobotDataset (every worker count)')} "
        f"({text_of(r['1']['pi_loader_vs_lerobot'])} with 1 worker, "
        f"{text_of(r['2']['pi_loader_vs_lerobot'])} with 2)",
        f"≥70% of the decode limit with 2 workers: "
        f"{verdict('>= 70% of the raw decode limit with 2 workers')} "
        f"({text_of(r['2']['pi_loader_vs_limit'])})",
        f"first batch on {first['episodes']:,} episodes via SQL < 5 s: "
        f"{verdict('time to first batch < 5 s on 1000 episodes')} "
        f"({text_of(first['first_batch_from_spawn_s'], '{:.2f}')} s from process start, each run a "
        f"fresh process; {first['peak_memory_mb']:.0f} MB)",
    ]
    storage = ", ".join(f"{k} {v} MB" for k, v in doc.get("storage_mb", {}).items())
    return (
        f"`baselines/loader.json` ({doc['data']['episodes']} episodes of "
        f"{doc['data']['episode_duration_s']:g} s, batch {doc['sample']['batch_size']}, "
        f"{len(repeats)} run(s) per leg; load average {_load(doc['machine'])}; samples/s):\n\n"
        f"{table}\n\n"
        + "\n".join(f"- {t}" for t in targets)
        + f"\n\nOn disk for the same episodes: {storage}."
        + _needs_rerun(doc)
    )


def _taken(doc: dict[str, Any]) -> str:
    taken = doc.get("sizes_taken_from")
    return (
        "" if not taken else f"; the lake sizes' figures from an earlier run: {taken['path'].split(' (')[0]}"
    )


def scale(b: Path) -> str:
    doc = json.loads((b / "scale.json").read_text())
    rows = []
    for s in sorted(doc["sizes"], key=lambda s: s["episodes"]):
        c, q, p = s["commit"], s["catalog_queries"], s.get("probe") or {}
        workers = [w.get("hwm_mb") for w in p.get("workers", []) if w.get("hwm_mb") is not None]
        rows.append(
            [
                f"{s['episodes']:,}",
                f"{c['per_episode_ms']['p50']:.1f} ({c['per_episode_cpu_ms']['p50']:.1f})",
                _num(c["catalog_record_ms"]["p50"], "{:.0f}"),
                "–"
                if not s.get("delta_log")
                else f"{s['delta_log']['episodes']['log_bytes'] / 2**20:.2f} "
                f"({s['delta_log']['episodes']['last_checkpoint_bytes'] / 2**20:.2f})",
                _num(p.get("open_s"), "{:.2f}"),
                f"{_num((p.get('main') or {}).get('hwm_mb'), '{:.0f}')} / "
                f"{_num(max(workers, default=None), '{:.0f}')}",
                f"{_num(p.get('bytes_read_per_sample'), '{:,.0f}')} "
                f"({_num(s['bytes_per_sample'].get('read_vs_encoded_chunks'), '{:.2f}')}×)",
                f"{q['selection']['p50']:.1f} / {q['group_by']['p50']:.1f} ({q['session_only']['p50']:.1f})",
            ]
        )
    header = [
        "episodes",
        "commit ms/episode p50 (CPU)",
        "catalog record ms",
        "Delta log MB, episodes (last checkpoint)",
        "open s",
        "main / worker peak MB",
        "bytes read per sample (× encoded rows)",
        "selection / group-by ms p50 (`SELECT 1`)",
    ]
    targets = []
    for name, d in doc["targets_detail"].items():
        verdict = d.get("verdict") or VERDICT[d["met"]]
        why = f": {d['why']}" if d.get("why") and d["met"] is not True else ""
        targets.append(
            f"- `{name}` ({d['limit']}): **{verdict}**, {text_of(d['value'])} at {d['judged_at']}{why}"
        )
    t = doc["throughput"]
    rates = "; ".join(
        f"{w} workers: " + ", ".join(f"{k} {text_of(v, '{:,.0f}')}" for k, v in per.items())
        for w, per in t["rates"].items()
    )
    return (
        f"`baselines/scale.json` ({doc['mode']} mode; lakes of "
        + ", ".join(f"{s['episodes']:,}" for s in doc["sizes"])
        + f" episodes{_taken(doc)}):\n\n{markdown(header, rows)}\n\n"
        f"Throughput on {t['data']['episodes']} distinct real episodes, samples/s: {rates}.\n\n"
        + "\n".join(targets)
        + _million(doc)
        + _needs_rerun(doc)
    )


def _million(doc: dict[str, Any]) -> str:
    """The million-episode run's operator commands and elapsed time (benchmarks.scale.million)."""
    m = doc.get("million")
    if not m:
        return ""
    ops = m["operations"]

    def op(name: str) -> str:
        o = ops.get(name) or {}
        if o.get("s") is not None:
            return f"{o['s']:,.1f} s" + ("" if o.get("returncode") == 0 else f" (exit {o.get('returncode')})")
        if o.get("timed_out_after_s") is not None:
            return f"over {o['timed_out_after_s']:,.0f} s (stopped)"
        return o.get("why") or "not measured"

    lines = [
        f"\n\nThe grown lake ({m['episodes_reached']:,} episodes, "
        f"{m['disk_bytes'] / 2**30:.1f} GiB; grown in {m['elapsed']['grow_s']:,.0f} s at "
        f"{_num(m.get('build_episodes_per_s'), '{:,.0f}')} episodes/s, measured in "
        f"{m['elapsed']['measure_s']:,.0f} s{'; ' + m['stopped'] if m.get('stopped') else ''}): "
        f"Dataset open {_num(m.get('open_cold_s'), '{:.2f}')} s cold host, "
        f"{_num(m.get('open_warm_s'), '{:.2f}')} s warm host, "
        f"{_num(m.get('open_again_s'), '{:.2f}')} s again in the same process; "
        f"`pilake verify` {op('verify')}; `pilake gc` {op('gc')}; "
        f"`pilake dataset create` {op('dataset_create')} and `pilake dataset copy` {op('dataset_copy')} "
        f"for a pin of {(ops.get('dataset_copy') or {}).get('episodes', 0):,} episodes."
    ]
    partial = ops.get("verify_partial")
    if partial:
        whole = partial["extrapolated_whole_lake_s"]
        lines.append(
            f" `pilake verify` checked {partial['checked_bytes'] / 2**30:.2f} of "
            f"{partial['lake_data_bytes'] / 2**30:.2f} GiB ({partial['checked_files']:,} of "
            f"{partial['lake_data_files']:,} files, all ok) in its {partial['in_s']:.0f} s: the whole lake "
            f"{whole['value']:,} s ({whole['how']})."
        )
    cold = m.get("open_cold_host_under_5s")
    if cold:
        lines.append(
            f" Open on a cold host {cold['limit']}: **{cold['verdict']}** "
            f"({_num(cold['value'], '{:.2f}')} s)."
        )
    lock = m.get("lock") or {}
    if lock and not lock.get("held"):
        lines.append(f" Measured without the machine's heavy lock (busy after {lock['waited_s']:.0f} s).")
    lines.append(million_notes(m))
    extrapolated = m.get("extrapolated_build_to_1m_s")
    if extrapolated:
        lines.append(f" Growth to 1,000,000: {extrapolated['value']:,} s ({extrapolated['how']}).")
    return "".join(lines)


def trainer(b: Path) -> str:
    doc = json.loads((b / "trainer.json").read_text())
    rows = []
    for leg in doc["legs"]:
        compute = leg.get("compute_ms_per_step", (leg.get("ms_per_step") or {}).get("compute"))
        rows.append(
            [
                leg["framework"],
                str(leg["workers"]),
                text_of(leg["samples_per_s"], "{:.0f}"),
                text_of(leg["data_wait_fraction"], "{:.1%}"),
                text_of(compute, "{:.0f}"),
            ]
        )
    table = markdown(["framework", "workers", "samples/s", "data wait", "compute ms/step"], rows)
    ratios = "; ".join(
        f"{fw}: 2 workers / 0 {text_of(r['speedup_2_vs_0_workers'])}, not waiting with 2 "
        f"{text_of(r['not_waiting_2_workers'])}"
        for fw, r in doc["ratios"].items()
    )
    repeats = doc["config"].get("repeats", 1)
    return (
        f"`baselines/trainer.json` ({doc['mode']}, batch {doc['config']['batch_size']}, "
        f"{doc['config']['steps']} steps a leg, {repeats} run(s) per leg; "
        f"{doc['machine']['cpus']} CPUs, load average {doc['machine']['load_avg'][0]:.1f} at the start):\n\n"
        f"{table}\n\nRatios: {ratios}." + _needs_rerun(doc)
    )


def trainer_scaling(b: Path) -> str:
    # this machine's run, then the 16-core lent GPU host's (its CPUs; the GPU idle), when committed
    names = ["trainer_scaling.json", "trainer_scaling_host16.json"]
    return "\n\n".join(_trainer_scaling_one(b, name) for name in names if (b / name).exists())


def _trainer_scaling_one(b: Path, name: str) -> str:
    doc = json.loads((b / name).read_text())
    rows = [
        [
            leg["framework"],
            str(leg["nproc"]),
            str(leg["global_batch"]),
            text_of(leg["samples_per_s"], "{:.1f}"),
            text_of(leg["step_ms"], "{:.0f}"),
            text_of(leg["efficiency"], "{:.2f}") if leg["efficiency"] else "1 (base)",
        ]
        for leg in doc["legs"]
    ]
    header = ["framework", "processes", "global batch", "samples/s", "step ms", "efficiency"]
    c = doc["config"]
    return (
        f"`baselines/{name}` ({doc['mode']}, batch {c['batch_size_per_process']} per process, "
        f"{c['steps']} steps a leg, {c['repeats']} interleaved repeats, median (min–max); "
        f"{doc['machine']['cpus']} CPUs, load average {doc['machine']['load_avg'][0]:.1f} at the start):\n\n"
        f"{markdown(header, rows)}"
    )


def steps_window(b: Path) -> str:
    doc = json.loads((b / "steps_window.json").read_text())
    rows = []
    for d in doc["durations"]:
        for i, (name, lay) in enumerate(d["layouts"].items()):
            rows.append(
                [
                    f"{d['duration_s']:g} s ({d['steps_per_episode']:,} steps)" if i == 0 else "",
                    name.replace("_", " "),
                    f"{lay['bytes_read_per_sample'] / 1000:.1f} ({lay['steps_bytes_per_sample'] / 1000:.1f})",
                    f"{lay['steps_reads_per_sample']:.2f}",
                    f"{lay['read_vs_encoded_chunks']:.2f}",
                    text_of(lay["cpu_ms_per_sample"], "{:.2f}"),
                    text_of(d.get("cpu_groups_vs_one_per_episode"), "{:.2f}") if i == 0 else "",
                ]
            )
    header = [
        "episode",
        "steps layout",
        "kB read per sample (of it steps)",
        "steps row groups per sample",
        "× encoded chunks",
        "CPU ms per sample",
        "CPU groups / one per episode",
    ]
    c = doc["config"]
    return (
        f"`baselines/steps_window.json` ({c['episodes']} copies per lake at {c['px']} px, "
        f"{c['samples']} cold samples, {c['repeats']} runs per layout interleaved):\n\n"
        + markdown(header, rows)
    )


def norm_bound(b: Path) -> str:
    from pi_format.stats import GRID_V1, rank_error_bound

    def bound(steps_per_episode: float) -> float:
        return rank_error_bound(0.01, 1, max(int(steps_per_episode), 1))

    # the bound is floor + slope / s̄ (s̄: mean steps per episode); both read off the function
    floor = rank_error_bound(0.01, 0, 1)
    slope = (bound(1_000) - floor) * 1_000
    crossing = slope / (0.01 - floor)  # where the bound reaches the 1% target
    cells = [f"{100 * bound(s):.2f}%" for s in BOUND_STEPS]
    return (
        "Worst-case rank error of the merged q01/q99 (`pi_format.stats.rank_error_bound`), a function "
        "of the mean steps per episode s̄ (for any data, any number of episodes): "
        f"{100 * floor:.2f}% + {100 * slope:.0f}%/s̄ on the default grid (δ = {GRID_V1.delta:g}, "
        f"ρ = {GRID_V1.ratio:g}). It is above the 1% target for episodes shorter than "
        f"{crossing:.0f} steps on average.\n\n"
        + markdown(["mean steps per episode", *(f"{s:,}" for s in BOUND_STEPS)], [["bound", *cells]])
    )


def norm_stats(b: Path) -> str:
    path = b / "norm_stats.json"
    if not path.exists():
        return (
            "No committed run (`baselines/norm_stats.json` is missing): run "
            "`python -m benchmarks.norm_stats.run --out DIR`, copy `DIR/norm_stats.json` to "
            "`benchmarks/baselines/` and rerun `python -m benchmarks.render_docs`."
        )
    doc = json.loads(path.read_text())
    t, err, val = doc["times_ms"], doc["rank_error"], doc["value_error_over_q99_minus_q01"]
    merge = doc["targets_detail"]["merge_under_100ms"]
    steps = doc["steps"] / doc["episodes"]
    rows = [
        ["merge, mean/std/min/max/q01/q99 of both features, ms", text_of(t["merge"]["wall_ms"], "{:.1f}")],
        [
            "of it: decoding the sketches / quantiles / moments only, ms",
            " / ".join(
                text_of(t[k]["wall_ms"], "{:.1f}") for k in ("decode", "quantiles_only", "moments_only")
            ),
        ],
        ["reading the rows' statistics columns (Parquet), ms", f"{t['read_rows_ms']:.0f} (one read)"],
        [
            "exact full pass (no video): in memory / reading the steps, s",
            f"{t['full_pass_in_memory_ms'] / 1e3:.1f} / {t['full_pass_with_reads_ms'] / 1e3:.1f} (one pass)",
        ],
        [
            "rank error of q01/q99, 28 dims (the bound at these lengths)",
            f"max {100 * err['sketch']['max']:.3f}%, mean {100 * err['sketch']['mean']:.3f}% "
            f"({100 * err['bound']:.2f}%)",
        ],
        ["value error of q01/q99, of (q99 − q01)", f"≤ {100 * max(val['q01_max'], val['q99_max']):.2f}%"],
        ["sketch bytes per episode (both features)", f"{doc['bytes_per_episode']['sketches']:,}"],
        [
            "naive merge (length-weighted mean of per-episode q01/q99): rank error",
            f"max {100 * err['naive_per_episode']['max']:.1f}%, "
            f"mean {100 * err['naive_per_episode']['mean']:.1f}%",
        ],
        [
            "fixed-edge histograms (256 bins over ±2π): rank error",
            f"max {100 * err['histogram']['max']:.1f}%",
        ],
    ]
    return (
        f"`baselines/norm_stats.json` ({doc['episodes']:,} episodes, {doc['steps']:,} steps, "
        f"{steps:,.0f} per episode on average; {doc['machine']['cpus']} CPUs, load average "
        f"{doc['machine']['load_average_at_start'][0]:g} at the start):\n\n"
        + markdown(["", ""], rows)
        + f"\n\nTargets: rank error ≤ 1%: {VERDICT[doc['targets']['rank_error_at_most_1pct']]}; "
        "merged in < 100 ms: "
        f"{merge['verdict']} ({text_of(t['merge']['wall_ms'], '{:.1f}')} ms over the repeats)."
    )


def _figure(node: Any) -> str:
    """A figure of the lifecycle tables: a spread as "median (min–max)", thousands as whole
    numbers; an exact number as `_short`."""
    if isinstance(node, dict):
        median = node.get("median", node.get("legacy"))
        return text_of(node, "{:,.0f}" if median is not None and abs(median) >= 1000 else "{:.3g}")
    return _short(node)


def compaction(b: Path) -> str:
    doc = json.loads((b / "compaction.json").read_text())
    rows = [
        [
            c["metric"],
            _figure(c["before"]),
            _figure(c["after"]),
            text_of(c["after_over_before"], "{:.3f}"),
        ]
        for c in doc["comparison"]
    ]
    m, cfg = doc["maintenance"], doc["config"]
    same = doc["samples_identical"]
    load = doc["machine"]
    return (
        f"`baselines/compaction.json` ({cfg['episodes']:,} episodes in groups of {cfg['group']}, the "
        f"lake and its compacted copy side by side; timed rows: median (min–max) of {cfg['repeats']} "
        "repeats, the two states interleaved, and after / before the median (min–max) of the "
        "per-repeat ratios; counts and sizes exact; shared 2-core machine, load average "
        f"{load['load_average_start'][0]:g} at the start, {load['load_average_end'][0]:g} at the end):\n\n"
        + markdown(["", "before", "after", "after / before"], rows)
        + f"\n\nCompaction {m['compact_s']} s, GC {m['gc_s']} s, "
        f"peak RSS {m['peak_rss_mb']['after_compact']:.0f} MB; "
        f"samples identical {same['identical']}/{same['checked']}; whole run {doc['wall_s'] / 60:.0f} min."
    )


def backfill_raw(b: Path) -> str:
    doc = json.loads((b / "backfill_raw.json").read_text())
    rows = [
        [
            f"{r['raw_files']:,} ({r['raw_mb']:,.0f} MB)",
            text_of(r["whole_table_ms_per_episode"], "{:,.1f}"),
            text_of(r["planned_files_ms_per_episode"], "{:.2f}"),
            text_of(r["whole_over_planned"], "{:.0f}"),
            text_of(r["plan_s_for_the_sample"], "{:.2f}") + f" ({r['sampled_episodes']} episodes)",
        ]
        for r in doc["results"]
    ]
    cfg, load = doc["config"], doc["machine"]
    return (
        f"`baselines/backfill_raw.json` (median (min–max) of {cfg['repeats']} repeats per size, the "
        "two legs interleaved; whole / planned is the median (min–max) of the per-repeat ratios; "
        "warm page cache; shared 2-core machine, load average "
        f"{load['load_average'][0]:g} at the start, {load['load_average_end'][0]:g} at the end):\n\n"
        + markdown(
            [
                "raw files",
                "filter the whole table, ms/episode",
                "read the planned files, ms/episode",
                "whole / planned",
                "the plan, s",
            ],
            rows,
        )
    )


def ingest(b: Path) -> str:
    doc = json.loads((b / "ingest.json").read_text())
    rows = [
        [
            str(r["parallelism"]),
            str(int(r.get("repeat", 0)) + 1),
            f"{r['burst']['episodes_per_s']:.2f}",
            f"{r['burst']['mb_per_s']:.2f}",
            f"{r['freshness_p50_s']:.2f} / {r['freshness_p95_s']:.2f}",
        ]
        for r in doc["runs"]
    ]
    t, detail = doc["targets"], doc.get("targets_detail", {})

    def verdict(name: str) -> str:
        return str(detail[name]["verdict"]) if name in detail else VERDICT[t[name]]

    p95 = (
        f" ({text_of(doc['freshness_p95_s'], '{:.2f}')} s over the runs)" if "freshness_p95_s" in doc else ""
    )
    return (
        f"`baselines/ingest.json` (bursts of {doc['runs'][0]['burst']['episodes']} episodes):\n\n"
        + markdown(["sink parallelism", "run", "episodes/s", "MB/s", "freshness p50 / p95 s"], rows)
        + f"\n\nParallelism 2 / 1: {text_of(doc['speedup_p2_over_p1'], '{:.2f}')} (target ≥ 1.6×: "
        f"{verdict('p2_at_least_1.6x_p1')}); freshness p95 < 2 s: {verdict('freshness_p95_under_2s')}{p95}."
        + _needs_rerun(doc)
    )


def ingest_cpu(b: Path) -> str:
    doc = json.loads((b / "ingest_cpu.json").read_text())
    mode_of = {"ingest": "process", "ingest_thread": "thread"}  # benchmarks.ingest.cpu.LEG_OF_MODE
    rows = [
        [
            "transcode alone (decode + encode, same settings)",
            text_of(doc["transcode_cpu_ms_per_episode"], "{:,.0f}"),
            "",
        ]
    ]
    verdicts = []
    for leg, mode in mode_of.items():
        if f"{leg}_cpu_ms_per_episode" not in doc:
            continue
        split: dict[str, list[float]] = {}
        for r in doc["runs"]:
            if r["leg"] == leg:
                # by role (cli, jvm, python_worker) where the run has it, else by process name
                for kind, cpu_s in (r.get("cpu_s_by_role") or r.get("cpu_s_by_process", {})).items():
                    split.setdefault(kind, []).append(1000 * cpu_s / doc["episodes"])
        parts = ", ".join(
            f"{kind} {sorted(v)[len(v) // 2]:,.0f}" for kind, v in sorted(split.items()) if max(v) >= 1
        )
        rows.append(
            [
                f"ingest: the stream job's process tree (PyFlink {mode} mode)",
                text_of(doc[f"{leg}_cpu_ms_per_episode"], "{:,.0f}"),
                parts,
            ]
        )
        verdict = doc["targets_detail"][f"{leg}_cpu_at_most_1.3x_transcode"]["verdict"]
        verdicts.append(f"{mode} mode {text_of(doc[f'{leg}_over_transcode'], '{:.2f}')}× ({verdict})")
    rows.append(
        ["the broker (beside, not in the ratio)", text_of(doc["broker_cpu_ms_per_episode"], "{:,.0f}"), ""]
    )
    thread_path = b / "ingest_cpu_thread.json"  # a run of its own: thread mode beside its transcode leg
    thread = ""
    if thread_path.exists():
        t = json.loads(thread_path.read_text())
        leg = "ingest_thread"
        thread = (
            f"\n\n`baselines/ingest_cpu_thread.json`, a run of its own ({t['episodes']} episodes of "
            f"{t['episode_duration_s']:g} s per leg, {len(t[f'{leg}_over_transcode']['values'])} "
            f"interleaved repeats): transcode alone {text_of(t['transcode_cpu_ms_per_episode'], '{:,.0f}')}, "
            f"ingest in PyFlink thread mode {text_of(t[f'{leg}_cpu_ms_per_episode'], '{:,.0f}')} CPU ms "
            f"per episode: {text_of(t[f'{leg}_over_transcode'], '{:.2f}')}× "
            f"({t['targets_detail'][f'{leg}_cpu_at_most_1.3x_transcode']['verdict']})."
        )
    return (
        f"`baselines/ingest_cpu.json` ({doc['episodes']} episodes of {doc['episode_duration_s']:g} s "
        f"per leg after {doc.get('warmup_episodes', 1)} uncounted warm-up episode(s) in each, "
        f"sink parallelism {doc.get('parallelism', 1)}, "
        f"{doc['cpu_count']} cores; median (min–max) of {len(doc['ingest_over_transcode']['values'])} "
        "interleaved repeats):\n\n"
        + markdown(["leg", "CPU ms per episode", "of it (medians)"], rows)
        + f"\n\nIngest / transcode (target ≤ 1.3× on the whole spread): {'; '.join(verdicts)}."
        + thread
    )


def baselines(b: Path) -> str:
    rows = []
    for path in sorted(b.glob("*.json")):
        doc = json.loads(path.read_text())
        note = doc.get("needs_rerun")
        if note:
            state = f"needs a rerun: {', '.join(note['what'])}"
        elif '"median"' in path.read_text():
            state = "medians with their spread"
        else:
            state = "single runs (no ratio or target is judged on them)"
        if doc.get("converted"):
            state += " (converted without a new measurement: its `converted` note says how)"
        rows.append([f"`{path.name}`", state])
    return markdown(["file", "state of its figures"], rows)


def ui(b: Path) -> str:
    doc = json.loads((b / "ui.json").read_text())
    sizes = list(doc["sizes"])
    largest = doc["sizes"][sizes[-1]]["pages"]
    rows = [
        [f"`{name}`"]
        + [text_of(doc["sizes"][s]["pages"][name]["seconds"], "{:.3f}") for s in sizes]
        + [largest[name]["target"]["verdict"]]
        for name in largest
    ]
    cfg = doc["config"]
    if "lake_episodes" in cfg:  # a baseline from before every page read a lake of its size
        header = ["page (server time, s)"] + [f"catalog of {int(s):,}" for s in sizes]
        what = f"lake of {cfg['lake_episodes']:,} episodes"
    else:
        header = ["page (server time, s)"] + [f"lake of {int(s):,}" for s in sizes]
        lake = doc["sizes"][sizes[-1]]["lake"]
        what = (
            f"a real lake and catalog of each size; at {int(sizes[-1]):,}: {lake['episodes']:,} episodes "
            f"and {lake['quarantined']:,} quarantined, bulk group commits of {cfg['lake']['bulk_group']} "
            f"compacted by `pilake compact`, then {cfg['lake']['tail_episodes']:,} in the sink's group "
            f"commits of {cfg['lake']['tail_group']}, uncompacted; a shared {doc['machine']['cpus']}-core "
            f"machine, load average {doc['machine']['loadavg_start'][0]:.1f} at the start"
        )
    return (
        f"`baselines/ui.json` ({what}; median (min–max) of "
        f"{cfg['repeats']} interleaved repeats per page, in process through starlette's TestClient):\n\n"
        + markdown([*header, "< 1 s at the largest"], rows)
        + "\n\nEvery page under 1 s at the largest size: "
        + ("yes." if doc["all_pages_under_target"] else "no.")
    )


def gpu_host(b: Path) -> str:
    doc = json.loads((b / "gpu_host.json").read_text())
    m, settings = doc["machine"], doc["settings"]
    loader_rows = [
        [
            w,
            text_of(row["raw_samples_per_s"], "{:,.0f}"),
            text_of(row["pi_loader_samples_per_s"], "{:,.0f}"),
            text_of(row["share_of_limit"], "{:.0%}"),
            text_of(row["pi_loader_first_batch_s"], "{:.2f}"),
        ]
        for w, row in doc["loader"].items()
    ]
    trainer_rows = [
        [
            f"{row['framework']}, batch {row['batch_size']}",
            text_of(row["samples_per_s"], "{:,.0f}"),
            text_of(row["ms_per_step"]["data_wait"], "{:.2f}"),
            text_of(row["ms_per_step"]["h2d"], "{:.2f}"),
            text_of(row["ms_per_step"]["compute"], "{:.2f}"),
            text_of(row["input_fraction"], "{:.1%}"),
            text_of(row["demand_samples_per_s"], "{:,.0f}"),
        ]
        for row in doc["trainer"].values()
    ]
    target_rows = [
        [f"`{name}`", t["rule"], t["verdict"], t.get("why", "") and f"{t['why']}; next: {t['next']}"]
        for name, t in doc["targets"].items()
    ]
    return (
        f"`baselines/gpu_host.json`: one run on {m['gpu']} ({m['cores']} cores, {m['memory_gb']} GB), "
        f"torch {m['torch']}, jax {m['jax']}, numpy {m['numpy']}, pyarrow {m['pyarrow']}; a "
        f"{doc['data']['episodes']}-episode lake of {doc['data']['duration_s']:g} s, 3 cameras at "
        f"{doc['data']['size_px']} px; median (min–max) of {settings['repeats']} interleaved repeats "
        f"per leg.\n\n"
        + markdown(
            ["workers", "raw decode limit, samples/s", "pi_loader, defaults", "share", "first batch, s"],
            loader_rows,
        )
        + "\n\nThe reference trainer (ms per step; input = data wait + exposed copy; demand = "
        "batch / compute, the rate a wait-free step needs):\n\n"
        + markdown(
            ["run", "samples/s", "data wait", "exposed copy", "compute", "input", "demand, samples/s"],
            trainer_rows,
        )
        + "\n\n"
        + markdown(["target", "rule", "verdict", "why not met"], target_rows)
    )


_ATTACK_HEADER = [
    "leg",
    "sent",
    "messages",
    "worker peak RSS",
    "sink held, peak",
    "valid freshness",
    "audit",
    "failures",
]


def attack(b: Path) -> str:
    doc = json.loads((b / "attack.json").read_text())
    rows = []
    for name, leg in doc["legs"].items():
        size, fresh, audit = leg["size"], leg["freshness_s"], leg["audit"]
        rows.append(
            [
                name,
                f"{size['cases']:,} + {size['flood_keys']:,} flood keys + {size['valid_episodes']} valid",
                f"{size['messages']:,} ({size['megabytes']:,.0f} MB)",
                f"{leg['peak_worker_rss_bytes'] / 1e6:,.0f} MB",
                f"{leg['peak_held_bytes'] / 1e6:.1f} MB",
                f"{fresh['median']:.3g} ({fresh['min']:.3g}–{fresh['max']:.3g}) s",
                f"{audit['visible']:,} visible + {audit['quarantined']:,} quarantined "
                f"of {audit['episodes_in']:,}{'' if audit['ok'] else ' (audit failed)'}",
                str(leg["failure_count"]),
            ]
        )
    held = doc["legs"]["attack"]["limits_acted"]
    return (
        f"`baselines/attack.json` (seed {doc['seed']}, the wire fuzz generator through the real broker into "
        f"`pilake stream`; a shared {doc['machine']['cpus_usable']}-core machine, load average "
        f"{doc['machine']['load_average_at_start'][0]:g} at the start; freshness = commit minus send time of "
        f"the valid episodes, median (min–max) over them):\n\n"
        + markdown(
            _ATTACK_HEADER,
            rows,
        )
        + "\n\nLimits that acted under attack: "
        + ", ".join(f"`{k}` {v:,}" for k, v in sorted(held.items()))
        + f". Claimed: {doc['bound_claimed']}. Held: {'yes' if doc['bound_held'] else 'no'}."
    )


from benchmarks._doc_s3 import s3_bytes  # noqa: E402 (its own module: this one is long)

BLOCKS: dict[str, Callable[[Path], str]] = {
    "attack": attack,
    "backfill_raw": backfill_raw,
    "baselines": baselines,
    "cold_open": cold_open,
    "compaction": compaction,
    "copy": copy_table,
    "gpu_host": gpu_host,
    "ingest": ingest,
    "ingest_cpu": ingest_cpu,
    "loader": loader,
    "loader_cpu": loader_cpu,
    "norm_bound": norm_bound,
    "norm_stats": norm_stats,
    "s3_bytes": s3_bytes,
    "scale": scale,
    "steps_window": steps_window,
    "trainer": trainer,
    "trainer_scaling": trainer_scaling,
    "ui": ui,
}
