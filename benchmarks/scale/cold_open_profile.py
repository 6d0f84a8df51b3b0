"""Where a cold `Dataset` open's time goes: one open under cProfile on a fresh host.

    python -m benchmarks.scale.cold_open_profile --lake /work/scale1m/run/home/lake \
        --out /tmp/cold-open-profile.json

"Cold" as the scale probe's cold-host leg means it (benchmarks/scale/run.py `probe`): a fresh
process with a fresh TMPDIR, so the host index directory (the episodes-rows segment, the
`opens/` cache, the steps and chunk indexes) is empty and every episodes file is read. The open
runs in a child process under cProfile; it prints and writes the open's wall time, the same open
again in that process and in a second fresh process on the same host directory (warm host), the
cumulative time of the open path's steps (`STEPS`: reading the episodes files, deciding
visibility, the statistics, the locators, the cache writes, ...), the episodes files the table
holds and the load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent

# (label, the function's file suffix and name as cProfile names it)
STEPS = (
    ("the whole open (Dataset.__init__)", "samples/_dataset.py", "__init__"),
    ("selecting the episodes rows", "selection/_selection.py", "select_episodes"),
    ("reading the episodes files through Parquet", "reading/_lake.py", "_read"),
    ("the page CRC walk beside it (a thread)", "reading/_damage.py", "pages_damaged"),
    ("visibility: latest commit per episode", "lake/visibility.py", "latest_commits"),
    ("writing the episodes-rows segment", "reading/_episodes_rows.py", "_write_segment"),
    ("saving the opens/ entry", "reading/_open_cache.py", "save"),
    ("pooled statistics", "reading/_lake.py", "pooled_stats"),
    ("locators", "reading/_locators.py", "from_rows"),
    ("camera columns", "reading/_locators.py", "_camera_columns"),
    ("the snapshot record", "selection/_snapshot.py", "__post_init__"),
    ("readers", "samples/_readers.py", "build_readers"),
    ("Delta log listing and load", "reading/_lake.py", "resolve_tables"),
)

_CHILD = """
import cProfile, json, pstats, sys, time
import pi_loader
lake, horizon = sys.argv[1], int(sys.argv[2])
profile = cProfile.Profile()
start = time.perf_counter()
profile.enable()
ds = pi_loader.Dataset(lake, seed=0, action_horizon=horizon)
profile.disable()
open_s = time.perf_counter() - start
start = time.perf_counter()
pi_loader.Dataset(lake, seed=0, action_horizon=horizon)
again_s = time.perf_counter() - start
stats = pstats.Stats(profile).stats
rows = [[f, line, name, cum] for (f, line, name), (_, _, _, cum, _) in stats.items()]
print(json.dumps({"open_s": open_s, "again_s": again_s, "episodes": len(ds.episode_ids), "rows": rows}))
"""


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def profile(lake: Path, horizon: int = 10) -> dict[str, Any]:
    """Profile one cold open of `lake` in a fresh process on a fresh TMPDIR (see the module doc)."""
    from deltalake import DeltaTable

    files = len(DeltaTable(str(lake / "episodes")).file_uris())
    host = Path(tempfile.mkdtemp(prefix="cold-open-host-"))
    env = {**os.environ, "TMPDIR": str(host), "OPENBLAS_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    before = load()
    command = [sys.executable, "-c", _CHILD, str(lake), str(horizon)]
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1800)
        if done.returncode != 0:
            raise RuntimeError(f"the profiled open failed: {done.stderr[-3000:]}")
        # then a fresh process on the same host directory: the warm-host open (its caches written)
        warm = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1800)
        if warm.returncode != 0:
            raise RuntimeError(f"the warm-host open failed: {warm.stderr[-3000:]}")
    finally:
        shutil.rmtree(host, ignore_errors=True)
    child = json.loads(done.stdout.strip().splitlines()[-1])
    warm_open_s = json.loads(warm.stdout.strip().splitlines()[-1])["open_s"]
    steps = []
    for label, suffix, name in STEPS:
        cum = [r[3] for r in child["rows"] if r[0].endswith(suffix) and r[2] == name]
        steps.append(
            {"step": label, "function": f"{suffix}:{name}", "s": round(max(cum), 3) if cum else None}
        )
    return {
        "how": "cProfile of one Dataset(lake) open in a fresh process on a fresh TMPDIR (the cold-host "
        "probe's host caches empty); cumulative seconds per step (steps overlap: the CRC walk runs "
        "in a thread beside the Parquet read, nested steps are inside their callers)",
        "measured_at_unix": round(time.time()),
        "episodes": child["episodes"],
        "episodes_files": files,
        "open_s": round(child["open_s"], 3),
        "open_again_in_process_s": round(child["again_s"], 3),
        "open_warm_host_s": round(warm_open_s, 3),  # a fresh process, the host caches in place (profiled)
        "steps": steps,
        "load_before": before,
        "load_after": load(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--lake", type=Path, required=True)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--horizon", type=int, default=10, help="action_horizon (the scale probe's: 10)")
    args = parser.parse_args(argv)
    result = profile(args.lake, args.horizon)
    print(
        f"open {result['open_s']:.2f} s ({result['episodes']:,} episodes, {result['episodes_files']:,} files)"
    )
    for step in result["steps"]:
        print(f"  {step['step']:<45} {step['s'] if step['s'] is not None else '-':>8}")
    print(
        f"again in the process {result['open_again_in_process_s']:.2f} s, warm host "
        f"{result['open_warm_host_s']:.2f} s; "
        f"load {result['load_before']} -> {result['load_after']}"
    )
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
