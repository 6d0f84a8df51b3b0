"""Fault report: runs the fault scenarios on real components and audits each.

For each fault (SIGKILL of the stream job, broker restart under two uploaders, bad bytes incl.
`kcat` garbage, two concurrent Delta writers, an unwritable lake) prints and records: episodes
in, visible, quarantined, lost, duplicated, plus what the scenario observed. Writes
results/faults.json and results/faults.png.

    python benchmarks/faults/run.py                  # all scenarios (~5 minutes on 2 cores)
    python benchmarks/faults/run.py --only bad_bytes
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
import time
from dataclasses import asdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))  # run as a script from anywhere

from benchmarks.faults.scenarios import SCENARIOS, FaultResult  # noqa: E402


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
        "machine": "2 cores, shared",
        "results": [asdict(r) for r in results],
        "failures": failures,
    }
    (args.out / "faults.json").write_text(json.dumps(doc, indent=2, default=str))
    if results:
        _plot(results, args.out / "faults.png")
    print("\nfault                 in  visible  quarantined  lost  duplicated   time")
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
