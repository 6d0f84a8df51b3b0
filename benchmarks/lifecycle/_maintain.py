"""Compaction then GC of one lake, in its own process (so its peak RSS is theirs):

    python -m benchmarks.lifecycle._maintain --lake DIR [--target-mb 128] [--small-mb 32]

Runs `pi_jobs.maintenance.compact(layout, CompactConfig(...))` and then
`gc(layout, GcConfig(retention_hours=0))`, timing each, and reads the process's RSS high-water
mark (`resource.getrusage(RUSAGE_SELF).ru_maxrss`, delta-rs's Rust allocations included) after
the imports, after compaction and after GC. Prints one JSON line prefixed with RESULT_PREFIX.
"""

from __future__ import annotations

import argparse
import dataclasses
import resource
import time
from pathlib import Path
from typing import Any

from benchmarks.loader._timing import report


def _hwm_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)  # kB on Linux


def maintain(args: argparse.Namespace) -> dict[str, Any]:
    from pi_format import LakeLayout
    from pi_jobs.maintenance import CompactConfig, GcConfig, compact, gc

    layout = LakeLayout(str(args.lake))
    config = CompactConfig(target_file_bytes=args.target_mb << 20, small_group_bytes=args.small_mb << 20)
    hwm_imports = _hwm_mb()
    started = time.perf_counter()
    compacted = compact(layout, config, progress=lambda line: print(f"    {line}", flush=True))
    compact_s = time.perf_counter() - started
    hwm_compact = _hwm_mb()
    started = time.perf_counter()
    collected = gc(
        layout, GcConfig(retention_hours=0), progress=lambda line: print(f"    {line}", flush=True)
    )
    gc_s = time.perf_counter() - started
    return {
        "config": {
            "target_file_bytes": config.target_file_bytes,
            "small_group_bytes": config.small_group_bytes,
        },
        "compact_s": round(compact_s, 2),
        "gc_s": round(gc_s, 2),
        "peak_rss_mb": {"after_imports": hwm_imports, "after_compact": hwm_compact, "after_gc": _hwm_mb()},
        "compact_report": dataclasses.asdict(compacted),
        "compact_lines": compacted.lines(),
        "gc_report": dataclasses.asdict(collected),
        "gc_lines": collected.lines(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--lake", type=Path, required=True)
    parser.add_argument("--target-mb", type=int, default=128)
    parser.add_argument("--small-mb", type=int, default=32)
    report(maintain(parser.parse_args()))


if __name__ == "__main__":
    main()
