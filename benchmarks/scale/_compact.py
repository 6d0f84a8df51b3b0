"""Compaction of a grown scale lake, as production runs it, in windows that each commit.

    nice -n 19 python -m benchmarks.scale._compact --lake /work/scale1m/run/home/lake \
        --window-groups 280 >> /work/scale1m/compact.log 2>&1 &

Production compacts with `pilake compact` every hour (deploy/k8s/maintenance.yaml: `pilake
compact && pilake gc --retention-hours 24`), so a streaming lake never holds more than an hour
of small files. A lake grown without it (the million run before this module: 5,025 episodes
files of 200 episodes) holds them all; one `pilake compact` over it is a single rewrite of every
steps, video and episodes file that commits once at its end (all or nothing, hours on this
machine). `compact_windows` runs the same plan (`choose_groups`, `CompactConfig` defaults) and
the same rewrite (`rewrite_groups`) over consecutive windows of the small file groups in episode
order, each window one commit of its adds and removes, under the lake's maintenance lock: what
the hourly runs would have done, resumable (a stopped run leaves whole windows committed; the
next run plans from what is still small). The growth loop calls `compaction.compact` itself
every `--compact-every` group commits (million.py).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def compact_windows(
    lake: Path,
    window_groups: int,
    *,
    max_windows: int | None = None,
    stop_file: Path | None = None,
    episodes_only: bool = False,
    record: Callable[[dict[str, Any]], None] | None = None,
    say: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Merge the lake's small file groups (CompactConfig defaults) `window_groups` at a time,
    one commit per window; returns the figures (files before and after, windows, seconds).
    With `stop_file`, stops before the next window once that file exists (whole windows kept);
    `record(figures)` is called after every window (figures so far). With `episodes_only`, each
    window merges only its groups' episodes files (`pilake compact --episodes-only`).

    Example:
        >>> compact_windows(Path("/data/lake"), 280)["files_after"]["episodes"]
    """
    from pi_format import LakeLayout
    from pi_format.lake.file_groups import read_lake_files
    from pi_format.lake.rewrite import rewrite_groups
    from pi_format.lake.rewrite_markers import merge_markers
    from pi_jobs.maintenance._lock import maintenance_lock
    from pi_jobs.maintenance.compaction import CompactConfig, _file_counts, choose_groups, legacy_files

    if window_groups < 2:
        raise ValueError(
            f"window_groups must be >= 2 (one group merged alone gains nothing), got {window_groups}"
        )
    config = CompactConfig(episodes_only=episodes_only)
    rewrite = merge_markers if episodes_only else rewrite_groups
    layout = LakeLayout(str(lake))
    names = ("steps", "video", "episodes")
    started = time.monotonic()
    out: dict[str, Any] = {
        "files_before": _file_counts(layout, names),
        "episodes_only": episodes_only,
        "windows": [],
    }
    with maintenance_lock(layout, "compact"):
        planned = time.monotonic()
        files = read_lake_files(layout)
        chosen = choose_groups(files.groups, legacy_files(files.markers), config)
        # episode order: each output file then holds a contiguous id range (as hourly runs would)
        first_id: dict[str, str] = {}
        for path, episode in zip(
            files.markers.column("file").to_pylist(),
            files.markers.column("episode_id").to_pylist(),
            strict=True,
        ):
            if path not in first_id or episode < first_id[path]:
                first_id[path] = episode
        chosen.sort(key=lambda g: min(first_id.get(p, "") for p in g.episodes_files))
        out["plan_s"] = round(time.monotonic() - planned, 1)
        out["small_groups"] = len(chosen)
        say(f"compact: {len(files.groups)} file groups, {len(chosen)} small; planned in {out['plan_s']} s")
        windows = [chosen[i : i + window_groups] for i in range(0, len(chosen), window_groups)]
        if max_windows is not None:
            windows = windows[:max_windows]
        for n, window in enumerate(windows, 1):
            if len(window) < 2:
                break
            if stop_file is not None and stop_file.exists():
                out["stopped"] = f"{stop_file} found before window {n} of {len(windows)}"
                say(f"compact: {out['stopped']}")
                break
            t = time.monotonic()
            result = rewrite(layout, window, target_file_bytes=config.target_file_bytes, writer_id="compact")
            took = round(time.monotonic() - t, 1)
            out["windows"].append(
                {
                    "groups": len(window),
                    "s": took,
                    "added": dict(result.files_added),
                    "removed": dict(result.files_removed),
                    # the bytes of the files merged (read) and written, all tables
                    "bytes_removed": sum(result.bytes_removed.values()),
                    "bytes_added": sum(result.bytes_added.values()),
                    "mb_per_s": round(sum(result.bytes_removed.values()) / 1e6 / max(took, 1e-3), 2),
                }
            )
            if record is not None:
                record(out)
            say(
                f"compact: window {n}/{len(windows)}: {len(window)} groups -> {dict(result.files_added)} "
                f"in {took} s ({time.monotonic() - started:.0f} s in all)"
            )
    out["files_after"] = _file_counts(layout, names)
    out["s"] = round(time.monotonic() - started, 1)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--lake", type=Path, required=True)
    parser.add_argument("--window-groups", type=int, default=280, help="small file groups per commit")
    parser.add_argument("--max-windows", type=int, default=None, help="stop after this many windows")
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    parser.add_argument(
        "--episodes-only",
        action="store_true",
        help="merge only episodes files (pilake compact --episodes-only)",
    )
    parser.add_argument("--stop-file", type=Path, default=None, help="stop between windows once it exists")
    args = parser.parse_args(argv)
    figures = compact_windows(
        args.lake,
        args.window_groups,
        max_windows=args.max_windows,
        stop_file=args.stop_file,
        episodes_only=args.episodes_only,
        record=None if args.json is None else lambda f: args.json.write_text(json.dumps(f, indent=2)),
        say=lambda s: print(s, flush=True),
    )
    print(json.dumps({k: v for k, v in figures.items() if k != "windows"}), flush=True)
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
