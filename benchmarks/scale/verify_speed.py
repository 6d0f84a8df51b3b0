"""`pilake verify`'s per-file check, before and after its fast path, on the same files of a grown
lake (read-only: nothing is written under the lake).

    python -m benchmarks.scale.verify_speed --lake /work/scale1m/run/home/lake --out DIR

A bounded, fixed part of the lake (the first `--files` files of each table by path, as the Delta
log lists them) is checked file by file as `verify_lake` checks it (`_scan.check_file`), in two
legs interleaved `--repeats` times: `slow`, the checks as they were before the fast path (the
Python page walk with each page decompressed, then one pyarrow decode per row group; the fast
path switched off for the leg), and `fast`, the code as it is. The files are read once before
the legs, so both read from the page cache. Every leg must find the same statuses (asserted).
Prints and writes OUT/verify_speed.json: MB/s per leg (median, min-max), the speedup, the load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any


def files_of(lake: Path, per_table: int) -> list[tuple[str, str, int, bool]]:
    from pi_format import LakeLayout
    from pi_jobs.integrity.verify import _table_state

    layout = LakeLayout(str(lake))
    out = []
    for table in ("episodes", "steps", "video", "raw"):
        files, required, _ = _table_state(layout, table)
        for path, size in sorted((files or {}).items())[:per_table]:
            out.append((table, path, size, required))
    return out


def leg(lake: Path, files: list[tuple[str, str, int, bool]], *, fast: bool) -> dict[str, Any]:
    from pi_format import LakeLayout
    from pi_format.lake import table_filesystem
    from pi_jobs.integrity import _scan

    layout = LakeLayout(str(lake))
    real = _scan._fast_checks
    if not fast:
        _scan._fast_checks = lambda *args: False
    try:
        start, cpu = time.perf_counter(), time.process_time()
        statuses, total = [], 0
        for table, path, size, required in files:
            fs, base = table_filesystem(layout.table(table))
            result = _scan.check_file(fs, base, table, path, size, require_crc=required)
            statuses.append(result.status)
            total += result.bytes
        took, used = time.perf_counter() - start, time.process_time() - cpu
    finally:
        _scan._fast_checks = real
    return {"s": took, "cpu_s": used, "bytes": total, "mb_per_s": total / 1e6 / took, "statuses": statuses}


def spread(values: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), 2),
        "min": round(min(values), 2),
        "max": round(max(values), 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--lake", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--files", type=int, default=20, help="files per table")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    files = files_of(args.lake, args.files)
    for table, path, _, _ in files:  # into the page cache: both legs read from memory
        (args.lake / table / path).read_bytes()
    load_before = os.getloadavg()
    runs: dict[str, list[dict[str, Any]]] = {"slow": [], "fast": []}
    for r in range(args.repeats):
        for name in ("slow", "fast") if r % 2 == 0 else ("fast", "slow"):
            runs[name].append(leg(args.lake, files, fast=name == "fast"))
            print(f"  {name}: {runs[name][-1]['mb_per_s']:.1f} MB/s", flush=True)
    if runs["slow"][0]["statuses"] != runs["fast"][0]["statuses"]:
        raise SystemExit("the fast and slow legs disagree on a file's status")
    slow = [x["mb_per_s"] for x in runs["slow"]]
    fast = [x["mb_per_s"] for x in runs["fast"]]
    ratios = [f / s for f, s in zip(fast, slow, strict=True)]
    by_table: dict[str, int] = {}
    for table, _, _, _ in files:
        by_table[table] = by_table.get(table, 0) + 1
    result = {
        "what": "pilake verify's per-file check (_scan.check_file) on a fixed part of the lake, read-only; "
        "slow = the checks before the fast path (switched off), fast = as now; interleaved legs",
        "lake": str(args.lake),
        "files": by_table,
        "bytes": runs["fast"][0]["bytes"],
        "statuses": {s: runs["fast"][0]["statuses"].count(s) for s in set(runs["fast"][0]["statuses"])},
        "repeats": args.repeats,
        "slow_mb_per_s": spread(slow),
        "fast_mb_per_s": spread(fast),
        "speedup": spread(ratios),
        "cpu_s_per_leg": {
            "slow": spread([x["cpu_s"] for x in runs["slow"]]),
            "fast": spread([x["cpu_s"] for x in runs["fast"]]),
        },
        "load_average": {
            "before": [round(x, 2) for x in load_before],
            "after": [round(x, 2) for x in os.getloadavg()],
        },
        "measured_at_unix": round(time.time()),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "verify_speed.json").write_text(json.dumps(result, indent=2))
    print(json.dumps({k: result[k] for k in ("slow_mb_per_s", "fast_mb_per_s", "speedup", "load_average")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
