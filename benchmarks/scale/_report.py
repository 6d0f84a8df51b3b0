"""The scale benchmark's report: the issue's targets judged from the figures, the printed table
and the PNG (every figure against lake size, log x)."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

from benchmarks._figures import judge as judge_figure
from benchmarks._figures import spread_of, text_of

# The issue's targets (issue 11, "Targets"); judged at the largest size measured, against
# 1,000 episodes (or the smallest size when 1,000 was not measured).
COMMIT_GROWTH_MAX = 1.5
OPEN_MAX_S = 5.0
WORKER_MEMORY_TOLERANCE = 0.10
VS_LEROBOT_MIN = 5.0
VS_LIMIT_MIN = 0.70
BYTES_READ_MAX = 1.5
CATALOG_MAX_MS = 100.0
INGEST_SPEEDUP_MIN = 1.6
ISSUE_SIZE = 100_000
LEGS = {"raw": "raw decode limit", "pi_loader": "pi_loader", "lerobot": "LeRobotDataset v3"}
TARGETS = (
    "commit_cost_per_episode_within_1.5x",
    "ingest_parallelism_2_at_least_1.6x",
    "open_selection_under_5s",
    "worker_memory_within_10pct",
    "throughput_at_least_5x_lerobot",
    "throughput_at_least_70pct_of_decode_limit",
    "bytes_read_per_sample_at_most_1.5x_encoded",
    "catalog_selection_under_100ms",
    "catalog_group_by_under_100ms",
)


def worker_mb(size: dict[str, Any], field: str) -> float | None:
    """The largest `field` (hwm_mb, rss_anon_mb...) of the probe's loader workers at one size."""
    values = [w[field] for w in (size.get("probe") or {}).get("workers", []) if w.get(field)]
    return max(values) if values else None


def worker_hwm_mb(size: dict[str, Any]) -> float | None:
    return worker_mb(size, "hwm_mb")


def _stat(size: dict[str, Any], name: str) -> Any:
    return ((size.get("probe") or {}).get("loader_stats") or {}).get(name)


def _ingest_cpu(ingest: dict[str, Any]) -> str:
    """Why parallelism 2 cannot add much when the machine is already busy at parallelism 1."""
    busy = ingest.get("machine_cpu_busy") or {}
    if "1" not in busy:
        return ""
    return (
        f"; the machine's CPUs were {busy['1'] * 100:.0f}% busy during the parallelism-1 burst "
        f"({busy.get('2', 0) * 100:.0f}% at 2): broker, Flink JVM, uploader and sink workers share "
        "them, and one sink worker already re-encodes its episode's cameras on parallel threads"
    )


def _judge(ok: bool | None, value: Any, limit: str, at: str, why: str) -> dict[str, Any]:
    return {"met": ok, "value": value, "limit": limit, "judged_at": at, "why": None if ok else why}


def _scale_note(top: int) -> str:
    return "" if top >= ISSUE_SIZE else f" (judged at {top:,} episodes; the issue's size is {ISSUE_SIZE:,})"


def judge(results: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """{target: {met, value, limit, judged_at, why}}; met is None where it was not measured."""
    sizes = sorted(results["sizes"], key=lambda s: s["episodes"])
    out: dict[str, dict[str, Any]] = {}
    top = sizes[-1] if sizes else None
    base = next((s for s in sizes if s["episodes"] == 1000 and s is not top), sizes[0] if sizes else None)
    span = "" if top is None or base is None else f"{base['episodes']:,} -> {top['episodes']:,} episodes"
    n = 0 if top is None else top["episodes"]

    if top is None or base is None or top is base:
        out[TARGETS[0]] = _judge(None, None, "<= 1.5x", span, "needs two lake sizes")
    else:
        a, b = (s["commit"]["per_episode_ms"]["p50"] for s in (base, top))
        ca, cb = (s["commit"].get("per_episode_cpu_ms", {}).get("p50") for s in (base, top))
        ratio = round(b / a, 2)
        cpu = f" (CPU {cb:.1f} vs {ca:.1f} ms: {cb / ca:.2f}x)" if ca and cb else ""
        log = top["delta_log"]["episodes"]
        why = (
            f"p50 {b:.1f} ms/episode at {top['episodes']:,} vs {a:.1f} at {base['episodes']:,}: {ratio}x"
            f"{cpu}, missed by {(ratio / COMMIT_GROWTH_MAX - 1) * 100:.0f}%; timed over "
            f"{top['commit'].get('window_groups')} vs {base['commit'].get('window_groups')} group commits "
            f"(checkpoint interval {top['commit'].get('checkpoint_interval')}: a commit's cost rises with "
            f"the commits since the last checkpoint); the episodes table's Delta log is "
            f"{log['log_bytes'] / 2**20:.1f} MB, its last checkpoint "
            f"{log['last_checkpoint_bytes'] / 2**20:.2f} MB{_scale_note(n)}"
        )
        out[TARGETS[0]] = _judge(ratio <= COMMIT_GROWTH_MAX, ratio, "<= 1.5x", span, why)

    ingest = results.get("ingest") or {}
    speedup = ingest.get("parallelism_2_vs_1")
    # met only when the whole spread of the interleaved bursts' ratios clears 1.6x; a ratio of
    # single bursts (a legacy figure) is not measured
    verdict = judge_figure(spread_of(speedup), INGEST_SPEEDUP_MIN)
    out[TARGETS[1]] = _judge(
        verdict["met"],
        speedup,
        ">= 1.6x",
        ingest.get("source") or "",
        f"{text_of(speedup)}x: {verdict['verdict']}{_ingest_cpu(ingest)}"
        if verdict["met"] is not None
        else ingest.get("why") or f"no spread: {text_of(speedup)}",
    )
    out[TARGETS[1]]["verdict"] = verdict["verdict"]

    probe = (top or {}).get("probe") or {}
    open_s = probe.get("open_s")
    out[TARGETS[2]] = _judge(
        None if open_s is None else open_s < OPEN_MAX_S,
        open_s,
        "< 5 s",
        f"{n:,} episodes",
        f"{open_s} s, missed by {(open_s or 0) - OPEN_MAX_S:.2f} s{_scale_note(n)}"
        if open_s is not None
        else f"no open figure: {probe.get('error', 'probe did not run')}",
    )

    w0, w1 = (None, None) if base is None or top is None else (worker_hwm_mb(base), worker_hwm_mb(top))
    if base is None or top is None or w0 is None or w1 is None or top is base:
        out[TARGETS[3]] = _judge(None, None, "within +-10%", span, "needs worker memory at two sizes")
    else:
        change = round(w1 / w0 - 1, 3)
        out[TARGETS[3]] = _judge(
            abs(change) <= WORKER_MEMORY_TOLERANCE,
            change,
            "within +-10%",
            span,
            f"worker peak RSS {w0:.0f} -> {w1:.0f} MB ({change:+.1%}), missed by "
            f"{(abs(change) - WORKER_MEMORY_TOLERANCE) * 100:.1f} points; anonymous memory "
            f"{worker_mb(base, 'rss_anon_mb')} -> {worker_mb(top, 'rss_anon_mb')} MB, Parquet footers "
            f"read {_stat(base, 'footer_reads')} -> {_stat(top, 'footer_reads')}{_scale_note(n)}",
        )

    t = results.get("throughput") or {}
    ratios = t.get("ratios") or {}
    w = "2" if "2" in ratios else (max(ratios, key=int) if ratios else None)
    r = ratios.get(w, {}) if w else {}
    at = f"{t['data']['episodes']} real episodes, {w} workers" if t else "real lake (no throughput run)"
    if t.get("taken_from"):
        at += f" (legs of an earlier run: {t['taken_from']['path']})"
    for key, field, limit, floor in (
        (TARGETS[4], "pi_loader_vs_lerobot", ">= 5x", VS_LEROBOT_MIN),
        (TARGETS[5], "pi_loader_vs_limit", ">= 0.70", VS_LIMIT_MIN),
    ):
        # met only when the whole spread of the interleaved repeats clears the floor
        # (benchmarks._figures.judge): a median or a best run that crosses it on noise is not
        node = r.get(field)
        verdict = judge_figure(spread_of(node), floor)
        why = (
            f"{text_of(node)} ({limit}): {verdict['verdict']}; in CPU per sample "
            f"{text_of(r.get(field + '_cpu'))} (the whole process trees; less moved by other load)"
            if verdict["met"] is not None
            else t.get("why")
            or (
                f"{field} has no spread: {text_of(node)}"
                if node is not None
                else f"{field} not measured (no throughput run, or a leg failed)"
            )
        )
        out[key] = _judge(verdict["met"], node, limit, at, why)
        out[key]["verdict"] = verdict["verdict"]

    # judged where the loader's reads miss its caches: the real lake (distinct video), and the
    # largest metadata lake (as many data files, hence Parquet footers, as the lake has)
    b = t.get("bytes_per_sample") or {}
    m = (top or {}).get("bytes_per_sample") or {}
    ratios = {
        f"{at}": b.get("read_vs_encoded_chunks"),
        f"metadata lake, {n:,} episodes": m.get("read_vs_encoded_chunks"),
    }
    measured = {k: v for k, v in ratios.items() if v is not None}
    worst = max(measured.values()) if measured else None
    if worst is None:
        why = b.get("why") or t.get("why") or "not measured"
    else:
        why = "; ".join(
            f"{where}: {v}x"
            + (f", missed by {(v / BYTES_READ_MAX - 1) * 100:.0f}%" if v > BYTES_READ_MAX else "")
            for where, v in measured.items()
        )
        if top is not None:
            footers, samples = _stat(top, "footer_reads"), _stat(top, "samples")
            why += f" (Parquet footers read at {n:,} episodes: {footers} for {samples} samples)"
        if len(measured) < len(ratios):
            why += "; not measured: " + ", ".join(k for k in ratios if k not in measured)
        cold = {
            f"{at}": b.get("read_vs_encoded_chunks_cold_host"),
            f"metadata lake, {n:,} episodes": m.get("read_vs_encoded_chunks_cold_host"),
        }
        why += (
            ". Judged on a warm host: the host's steps and chunk indexes built by a first pass (once "
            "per host per file, kept like the disk cache), then a fresh process with cold per-process "
            "caches measures; on a cold host (indexes built during the probe): "
            + "; ".join(f"{where}: {v}x" for where, v in cold.items() if v is not None)
        )
    out[TARGETS[6]] = _judge(
        None if worst is None else worst <= BYTES_READ_MAX and len(measured) == len(ratios),
        worst,
        "<= 1.5x the encoded video rows holding the returned frames",
        " and ".join(ratios),
        why,
    )

    for key, name in ((TARGETS[7], "selection"), (TARGETS[8], "group_by")):
        q = ((top or {}).get("catalog_queries") or {}).get(name) or {}
        ms, session = q.get("p50"), ((top or {}).get("catalog_queries") or {}).get("session_only_cold", {})
        out[key] = _judge(
            None if ms is None else ms < CATALOG_MAX_MS,
            ms,
            "< 100 ms (p50, through Catalog.query_arrow on a held client)",
            f"{n:,} episodes",
            f"p50 {ms} ms, missed by {(ms or 0) - CATALOG_MAX_MS:.0f} ms; an empty call (SELECT 1) "
            f"cold costs {session.get('p50')} ms more per call (chdb: lock, open, close){_scale_note(n)}"
            if ms is not None
            else "no catalog figure",
        )
    return out


def _fmt(value: Any, spec: str = ".1f") -> str:
    return "-" if value is None else format(value, spec)


def print_table(results: dict[str, Any]) -> None:
    print(
        "\n| episodes | commit ms/episode p50 / p99 | group commit ms p50 | catalog record ms p50 "
        "| Delta log MB (episodes/steps/video) | checkpoints MB | open s | main MB | worker MB "
        "| bytes read/sample (x encoded) | selection ms | group-by ms |"
    )
    print("|" + " --- |" * 12)
    for s in sorted(results["sizes"], key=lambda s: s["episodes"]):
        c, log, q, p = s["commit"], s.get("delta_log") or {}, s["catalog_queries"], s.get("probe") or {}
        logs = "/".join(
            _fmt(log.get(t, {}).get("log_bytes", 0) / 2**20, ".2f") for t in ("episodes", "steps", "video")
        )
        ckpt = sum(v["checkpoint_bytes"] for v in log.values()) / 2**20
        print(
            f"| {s['episodes']:,} | {_fmt(c['per_episode_ms']['p50'])} / {_fmt(c['per_episode_ms']['p99'])} "
            f"| {_fmt(c['group_commit_ms']['p50'], '.0f')} | {_fmt(c['catalog_record_ms']['p50'], '.0f')} "
            f"| {logs} | {ckpt:.2f} | {_fmt(p.get('open_s'), '.2f')} "
            f"| {_fmt(p.get('main', {}).get('hwm_mb'), '.0f')} "
            f"| {_fmt(worker_hwm_mb(s), '.0f')} | {_fmt(p.get('bytes_read_per_sample'), '.0f')} "
            f"({_fmt((s.get('bytes_per_sample') or {}).get('read_vs_encoded_chunks'), '.2f')}x) "
            f"| {_fmt(q['selection']['p50'])} | {_fmt(q['group_by']['p50'])} |"
        )
    t = results.get("throughput") or {}
    for w, rates in (t.get("rates") or {}).items():
        line = ", ".join(f"{name} {text_of(rate, '{:.0f}')}" for name, rate in rates.items())
        r = t["ratios"].get(w, {})
        print(
            f"{t['data']['episodes']} real episodes, {w} worker(s), samples/s (median, min-max): {line}; "
            f"pi_loader / LeRobot = {text_of(r.get('pi_loader_vs_lerobot'))} (CPU per sample: "
            f"{text_of(r.get('pi_loader_vs_lerobot_cpu'))}), "
            f"/ limit = {text_of(r.get('pi_loader_vs_limit'))} "
            f"(CPU per sample: {text_of(r.get('pi_loader_vs_limit_cpu'))})"
        )
    b = t.get("bytes_per_sample") or {}
    if b:
        print(
            f"bytes per sample on the real lake: read {b.get('read')} ({b.get('why') or 'measured'}), "
            f"encoded rows {b.get('encoded_chunk_bytes')}, encoded frames {b.get('encoded_frame_bytes')}"
        )
    for name, d in results["targets_detail"].items():
        flag = (
            "UNDECIDED"
            if d.get("verdict") == "undecided"
            else {True: "PASS", False: "FAIL", None: "n/a"}[d["met"]]
        )
        print(
            f"target {name}: {flag} (value {text_of(d['value'])}, {d['limit']}, {d['judged_at']})"
            + (f": {d['why']}" if d["why"] else "")
        )


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = sorted(results["sizes"], key=lambda s: s["episodes"])
    x = [s["episodes"] for s in sizes]
    fig, axes = plt.subplots(2, 4, figsize=(22, 10))
    ax = axes[0][0]
    for key, label in (("p50", "p50"), ("p99", "p99")):
        ax.plot(x, [s["commit"]["per_episode_ms"][key] for s in sizes], "o-", label=f"Delta commit {label}")
    cpu = [s["commit"].get("per_episode_cpu_ms", {}).get("p50") for s in sizes]
    ax.plot(x, cpu, "^:", label="Delta commit p50, CPU of the process")
    ax.plot(
        x,
        [s["commit"]["catalog_record_ms"]["p50"] / s["commit"]["group_size"] for s in sizes],
        "s--",
        label="catalog record p50 (group / group size)",
    )
    ax.set_title(f"commit cost per episode (groups of {sizes[0]['commit']['group_size'] if sizes else '?'})")
    ax.set_ylabel("ms per episode")
    ax = axes[0][1]
    for i, table in enumerate(("episodes", "steps", "video")):
        ax.plot(
            x,
            [(s.get("delta_log") or {}).get(table, {}).get("log_bytes", 0) / 2**20 for s in sizes],
            "o-",
            color=f"C{i}",
            label=f"{table} _delta_log",
        )
        ax.plot(
            x,
            [(s.get("delta_log") or {}).get(table, {}).get("checkpoint_bytes", 0) / 2**20 for s in sizes],
            "x--",
            color=f"C{i}",
            label=f"{table} checkpoints",
        )
    ax.set_title("Delta log and checkpoint bytes")
    ax.set_ylabel("MB")
    ax = axes[0][2]
    ax.plot(x, [(s.get("probe") or {}).get("open_s") for s in sizes], "o-", label="Dataset(lake) (all)")
    ax.plot(x, [(s.get("probe") or {}).get("open_sql_s") for s in sizes], "s--", label="Dataset(sql=all)")
    ax.axhline(OPEN_MAX_S, color="red", lw=0.8, ls=":", label="target 5 s")
    ax.set_title("Dataset open time")
    ax.set_ylabel("s")
    ax = axes[0][3]
    ax.plot(
        x,
        [((s.get("probe") or {}).get("main") or {}).get("hwm_mb") for s in sizes],
        "o-",
        label="main process",
    )
    ax.plot(x, [worker_hwm_mb(s) for s in sizes], "s-", label="each worker (max)")
    ax.set_title("peak RSS (VmHWM), 2 workers, same caches")
    ax.set_ylabel("MB")
    ax = axes[1][0]
    for name in ("selection", "group_by", "session_only"):
        ax.plot(x, [s["catalog_queries"][name]["p50"] for s in sizes], "o-", label=f"{name} p50")
    ax.axhline(CATALOG_MAX_MS, color="red", lw=0.8, ls=":", label="target 100 ms")
    ax.set_title("catalog query latency (Catalog.query_arrow, chdb)")
    ax.set_ylabel("ms")
    ax = axes[1][1]
    per_sample = [(s.get("probe") or {}).get("bytes_read_per_sample") for s in sizes]
    if any(v is not None for v in per_sample):
        ax.plot(x, per_sample, "o-", label="bytes read / sample")
        encoded = [(s.get("bytes_per_sample") or {}).get("encoded_chunk_bytes") for s in sizes]
        ax.plot(x, encoded, "s--", label="encoded video rows of its frames")
        ax.set_yscale("log")
    else:
        why = next(((s.get("probe") or {}).get("bytes_read_why") for s in sizes), None) or "not measured"
        ax.text(0.02, 0.5, why[:300], transform=ax.transAxes, fontsize=7, wrap=True)
    ax.set_title("bytes read per sample (metadata lake)")
    for a in (*axes[0], axes[1][0], axes[1][1]):
        a.set_xscale("log")
        a.set_xticks(x, [f"{v:,}" for v in x])
        a.minorticks_off()
        a.set_xlabel("episodes in the lake")
        if a.get_legend_handles_labels()[0]:
            a.legend(fontsize=7)
    ax = axes[1][2]
    t = results.get("throughput") or {}
    rates = t.get("rates") or {}
    for k, name in enumerate(("raw", "pi_loader", "lerobot")):
        xs = [i + (k - 1) * 0.27 for i, w in enumerate(rates) if spread_of(rates[w].get(name))]
        figures = [f for w in rates if (f := spread_of(rates[w].get(name))) is not None]
        ys = [f.median for f in figures]
        if ys:
            spans = [[f.median - f.low for f in figures], [f.high - f.median for f in figures]]
            bars = ax.bar(xs, ys, 0.27, yerr=spans, capsize=3, label=LEGS[name], color=f"C{k}")
            ax.bar_label(bars, fmt="%.0f", fontsize=8)
    ax.set_xticks(range(len(rates)), [f"{w} worker(s)" for w in rates])
    ax.set_title(f"shuffled samples/s, {t.get('data', {}).get('episodes', 0)} real episodes")
    if rates:
        ax.legend(fontsize=7)
    ax = axes[1][3]
    ax.axis("off")
    lines = []
    for name, d in results["targets_detail"].items():
        flag = (
            "UNDC"
            if d.get("verdict") == "undecided"
            else {True: "PASS", False: "FAIL", None: "n/a "}[d["met"]]
        )
        lines.append(f"{flag} {name}: {text_of(d['value'])} ({d['judged_at']})")
        if d["why"]:
            lines += textwrap.wrap(d["why"], 70, initial_indent="     ", subsequent_indent="     ")
    m = results["machine"]
    lines += [
        "",
        f"{m['cpus_usable']} CPUs, {m['cpu_model']}, {m['memory_gib']} GiB",
        f"mode: {results['mode']}",
    ]
    ax.text(-0.1, 1, "\n".join(lines), va="top", fontsize=6.5, family="monospace")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
