"""Fault report: runs the fault scenarios on real components and audits each.

For each fault (SIGKILL of the stream job, broker restart under two uploaders, bad bytes incl.
`kcat` garbage, two concurrent Delta writers, an unwritable lake) prints and records: episodes
in, visible, quarantined, lost, duplicated, plus what the scenario observed, and the machine it
ran on (read at start: CPUs, model, memory, platform, load average). Writes results/faults.json
and results/faults.png. The scenarios live in `pi_jobs.local.faults` (the fault tests run them too).

    python benchmarks/faults/run.py                  # all scenarios (~5 minutes on 2 cores)
    python benchmarks/faults/run.py --only bad_bytes
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import shutil
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from pi_jobs.local.faults import SCENARIOS, FaultResult

HERE = Path(__file__).resolve().parent


def _proc_field(path: str, name: str) -> str | None:
    """The value of the first `name: value` line of a /proc file (None where unreadable)."""
    try:
        with open(path) as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == name:
                    return value.strip()
    except OSError:
        pass
    return None


def machine() -> dict[str, Any]:
    """What this run ran on, read at its start: the fault timings depend on it (and on the load)."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    mem_kb = _proc_field("/proc/meminfo", "MemTotal")  # "24683656 kB"
    return {
        "cpus_usable": usable,
        "cpus_online": os.cpu_count(),
        "cpu_model": _proc_field("/proc/cpuinfo", "model name") or platform.processor() or None,
        "memory_gib": None if mem_kb is None else round(int(mem_kb.split()[0]) / 2**20, 1),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
    }


def describe(m: dict[str, Any]) -> str:
    """One line for the printed header."""
    load = " ".join(f"{x:.2f}" for x in m["load_average_at_start"])
    return (
        f"{m['cpus_usable']} CPUs usable ({m['cpus_online']} online), {m['cpu_model'] or 'unknown CPU'}, "
        f"{m['memory_gib']} GiB, {m['platform']}, Python {m['python']}; load average at start {load}"
    )


def _plot(results: list[FaultResult], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    names = [r.fault for r in results]
    series = {
        "in": [r.episodes_in for r in results],
        "visible": [r.visible for r in results],
        "quarantined": [r.quarantined for r in results],
        "lost": [r.lost for r in results],
        "duplicated": [r.duplicated for r in results],
    }
    colors = {"in": "#888", "visible": "#2a7", "quarantined": "#e90", "lost": "#d22", "duplicated": "#a2d"}
    x = np.arange(len(names))
    width = 0.16
    fig, ax = plt.subplots(figsize=(11, 4.8))
    for i, (label, values) in enumerate(series.items()):
        bars = ax.bar(x + (i - 2) * width, values, width, label=label, color=colors[label])
        ax.bar_label(bars, fontsize=8)
    ax.set_xticks(x, names)
    ax.set_ylabel("episodes")
    ax.set_title("pi-lake fault tests: every episode visible or quarantined, none lost or duplicated")
    ax.legend(ncols=5, loc="upper center", bbox_to_anchor=(0.5, -0.08), frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", action="append", choices=sorted(SCENARIOS), help="run only these")
    parser.add_argument("--out", type=Path, default=HERE / "results")
    parser.add_argument("--jars", type=Path, default=None, help="connector jar cache (default: OUT/jars)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("pi_ingest").setLevel(logging.WARNING)  # re-send lines are expected here

    host = machine()
    print(f"machine: {describe(host)}", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    jars = args.jars or args.out / "jars"
    work = args.out / "work"
    results: list[FaultResult] = []
    failures: dict[str, str] = {}
    for name in args.only or list(SCENARIOS):
        home = work / name
        shutil.rmtree(home, ignore_errors=True)
        t0 = time.monotonic()
        logging.info("fault %s: starting", name)
        try:
            results.append(SCENARIOS[name](home, jars))
        except Exception as err:  # report the others too, then fail
            failures[name] = f"{type(err).__name__}: {err}"[:2000]
            logging.exception("fault %s failed after %.0f s", name, time.monotonic() - t0)
    doc = {
        "machine": host,
        "results": [asdict(r) for r in results],
        "failures": failures,
    }
    (args.out / "faults.json").write_text(json.dumps(doc, indent=2, default=str))
    if results:
        _plot(results, args.out / "faults.png")
    print(f"\nmachine: {describe(host)}")
    print("fault                 in  visible  quarantined  lost  duplicated   time")
    for r in results:
        print(
            f"{r.fault:<20} {r.episodes_in:>3} {r.visible:>8} {r.quarantined:>12} {r.lost:>5} "
            f"{r.duplicated:>11} {r.elapsed_s:>6.0f} s"
        )
    for name, why in failures.items():
        print(f"{name:<20} FAILED: {why.splitlines()[0]}")
    print(f"\nwrote {args.out / 'faults.json'} and {args.out / 'faults.png'}")
    bad = failures or [r.fault for r in results if r.lost or r.duplicated or not r.audit.get("ok")]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
