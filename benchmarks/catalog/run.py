"""Catalog record benchmark: `Catalog.record_episodes` on an embedded chdb catalog as it grows.

Records N groups of 32 episodes (synthetic rows of the indexed episodes columns, new ids each
group) into a fresh chdb catalog, one cold call per group as the stream job's sink does, and
prints the record time per group over the first and the last groups, the process's open file
descriptors and threads, and the index table's part directories on disk (plus active and
outdated parts from `system.parts`) before and after. Writes JSON with --out.

    python -m benchmarks.catalog.run                    # 2,000 groups (64,000 episodes)
    python -m benchmarks.catalog.run --quick            # 300 groups
    python -m benchmarks.catalog.run --groups 5000 --out results/catalog.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
from pi_catalog import Catalog
from pi_catalog._schema import INDEX_TABLE, INDEXED_FIELDS

from benchmarks.faults.run import describe, machine

HERE = Path(__file__).resolve().parent
MODES: dict[str, dict[str, int]] = {
    "full": dict(groups=2000, window=50, sample_every=100),
    "quick": dict(groups=300, window=20, sample_every=50),
}


def group_rows(group: int, size: int) -> pa.Table:
    """`size` episodes rows (the indexed columns of EPISODES_SCHEMA) with ids unique to `group`."""
    n, first = size, group * size
    ids = range(first, first + n)
    floats = [[0.5] * 14 for _ in ids]
    columns: dict[str, Any] = {
        "episode_id": [f"ep-{i:08d}" for i in ids],
        "attempt_id": [f"att-{i:08d}" for i in ids],
        "robot_id": [f"robot-{i % 64}" for i in ids],
        "robot_type": ["aloha"] * n,
        "task": [("pick", "place", "stack")[i % 3] for i in ids],
        "start_time_ns": [1_700_000_000_000_000_000 + i * 10**9 for i in ids],
        "control_rate_hz": [50.0] * n,
        "success": [i % 4 != 0 for i in ids],
        "tags": [["sim", f"t{i % 5}"] for i in ids],
        "step_count": [100] * n,
        "duration_s": [2.0] * n,
        "proprio_dim": [14] * n,
        "action_dim": [14] * n,
        "cameras": [["top", "wrist"]] * n,
        "camera_fps": [[15.0, 15.0]] * n,
        "video_width": [64] * n,
        "video_height": [64] * n,
        "video_chunk_frames": [30] * n,
        "raw_size_bytes": [1_000_000] * n,
        "received_at_ns": [1_700_000_000_000_000_000 + i for i in ids],
        "committed_at_ns": [1_700_000_000_000_000_000 + i for i in ids],
    }
    for stat in ("mean", "std", "min", "max"):
        columns[f"proprio_{stat}"] = floats
        columns[f"action_{stat}"] = floats
    return pa.table({f.name: pa.array(columns[f.name], f.type) for f in INDEXED_FIELDS})


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def threads() -> int:
    return len(os.listdir("/proc/self/task"))


def part_dirs(catalog_dir: Path) -> int:
    """Part directories of the index table on disk (active, outdated and temporary ones)."""
    count = 0
    for root in catalog_dir.glob("store/*/*"):
        names = [p.name for p in root.iterdir() if p.is_dir() and p.name != "detached"]
        if (root / "format_version.txt").exists():
            count += len(names)
    return count


def parts(catalog: Catalog) -> dict[str, int]:
    sql = (
        "SELECT countIf(active) AS n_active, countIf(NOT active) AS n_outdated FROM system.parts "
        f"WHERE database = currentDatabase() AND table = '{INDEX_TABLE}'"
    )
    row = catalog.query_arrow(sql).to_pylist()[0]
    return {"active": int(row["n_active"]), "outdated": int(row["n_outdated"])}


def snapshot(catalog: Catalog, catalog_dir: Path) -> dict[str, int]:
    # fds and threads first: reading system.parts is itself a catalog call
    out = {"open_fds": open_fds(), "threads": threads(), "part_dirs": part_dirs(catalog_dir)}
    return out | {f"{k}_parts": v for k, v in parts(catalog).items()}


def run(groups: int, group_size: int, window: int, sample_every: int, workdir: Path) -> dict[str, Any]:
    catalog_dir = workdir / "catalog"
    catalog = Catalog(str(catalog_dir))
    catalog.ensure_schema()
    before = snapshot(catalog, catalog_dir)
    times_ms: list[float] = []
    samples: list[dict[str, Any]] = []
    for g in range(groups):
        rows = group_rows(g, group_size)
        t0 = time.perf_counter()
        catalog.record_episodes(rows, episodes_version=g)
        times_ms.append((time.perf_counter() - t0) * 1000)
        if (g + 1) % sample_every == 0 or g + 1 == groups:
            recent = statistics.median(times_ms[-window:])
            sample = {"groups": g + 1, "record_ms_median": round(recent, 1)}
            sample |= {"open_fds": open_fds(), "threads": threads(), "part_dirs": part_dirs(catalog_dir)}
            samples.append(sample)
            print(
                f"  {g + 1:>6} groups: record {recent:7.1f} ms/group (median of last {window}), "
                f"{sample['open_fds']} fds, {sample['threads']} threads, {sample['part_dirs']} part dirs",
                flush=True,
            )
    after = snapshot(catalog, catalog_dir)
    episodes = catalog.query_arrow("SELECT count() AS n FROM episodes").column("n")[0].as_py()
    return {
        "groups": groups,
        "group_size": group_size,
        "episodes_indexed": int(episodes),
        "record_ms_first": round(statistics.median(times_ms[:window]), 1),
        "record_ms_last": round(statistics.median(times_ms[-window:]), 1),
        "record_ms_max": round(max(times_ms), 1),
        "record_s_total": round(sum(times_ms) / 1000, 1),
        "before": before,
        "after": after,
        "samples": samples,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="300 groups")
    parser.add_argument("--groups", type=int, default=None, help="groups recorded (default 2,000)")
    parser.add_argument("--group-size", type=int, default=32, help="episodes per group")
    parser.add_argument("--window", type=int, default=None, help="groups in the first/last medians")
    parser.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    parser.add_argument(
        "--workdir", type=Path, default=None, help="where the catalog goes (default: a temp dir)"
    )
    args = parser.parse_args(argv)
    mode = MODES["quick" if args.quick else "full"]
    groups = args.groups or mode["groups"]
    window = min(args.window or mode["window"], groups)
    host = machine()
    print(f"catalog record benchmark: {groups} groups of {args.group_size} episodes, chdb")
    print(f"machine: {describe(host)}", flush=True)
    workdir = Path(tempfile.mkdtemp(prefix="pilake-catalog-bench-", dir=args.workdir))
    try:
        result = run(groups, args.group_size, window, mode["sample_every"], workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    b, a = result["before"], result["after"]
    print(
        f"record time per group: {result['record_ms_first']} ms (median of the first {window}) -> "
        f"{result['record_ms_last']} ms (median of the last {window}); max {result['record_ms_max']} ms; "
        f"{result['record_s_total']} s in all, {result['episodes_indexed']} episodes indexed"
    )
    for key in ("open_fds", "threads", "part_dirs", "active_parts", "outdated_parts"):
        print(f"{key:>15}: {b[key]:>6} before -> {a[key]:>6} after")
    result["machine"] = host
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
