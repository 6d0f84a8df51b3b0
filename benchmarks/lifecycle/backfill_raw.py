"""How a backfill worker finds an episode's raw rows, against the size of the raw table.

`python -m benchmarks.lifecycle.backfill_raw --groups 50 200 800 --repeats 3 --out DIR` builds
raw tables as the stream job leaves them (one raw file per group commit, 32 episodes of 12
messages of 4 kB each, robots interleaved so every file's episode_id range is wide), then times,
for the same 40 episodes, the two ways of reading one episode's rows:

* `whole_table`: a filter on episode_id over the raw table's pyarrow dataset (what the backfill
  did per episode before: statistics prune little, so footers of most files are read);
* `planned_files`: the plan's one pass (`pi_jobs.backfill._raw_files.raw_files_of`, timed
  apart as `plan_s`: once per run of a backfill) and then a read of only the files holding the
  episode.

Per table size the two legs run interleaved, `--repeats` (>= 3) times each, the order rotated
each repeat (`benchmarks._figures.interleaved`); each leg opens its dataset afresh (untimed), so
no repeat finds the footers an earlier one cached. Reported per size: each leg's ms per episode
and the plan's seconds as the median with its spread (min–max), and `whole_over_planned`, the
per-repeat ratio whole_table / planned_files (same repeat, back to back) as the median with its
spread. Prints a table, writes DIR/backfill_raw.json and DIR/backfill_raw.png.

Warm page cache (the files are just written, and 800 files of 32 episodes are 1.3 GB, well
inside this machine's memory): it measures the per-episode work (footers, statistics, decoding),
not the disk.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
from pi_format import RAW_SCHEMA, LakeLayout
from pi_format.lake import LakeWriter, table_filesystem
from pi_jobs.backfill._raw_files import raw_files_of

from benchmarks._figures import MIN_REPEATS, interleaved, ratio, spread

EPISODES_PER_GROUP = 32
MESSAGES = 12
MESSAGE_BYTES = 4096
SAMPLED = 40
LEGS = ("whole_table", "planned_files")


def _group(index: int) -> pa.Table:
    ids, chunks = [], []
    for k in range(EPISODES_PER_GROUP):
        robot = k % 8  # robots interleave in a group: its id range spans most ids
        episode = f"r{robot}-{index * EPISODES_PER_GROUP + k:07d}"
        ids += [episode] * MESSAGES
        chunks += list(range(MESSAGES))
    n = len(ids)
    return pa.table(
        {
            "episode_id": ids,
            "chunk_index": pa.array(chunks, pa.int32()),
            "kafka_topic": ["episodes.raw.v1"] * n,
            "kafka_partition": pa.array([0] * n, pa.int32()),
            "kafka_offset": pa.array(range(n), pa.int64()),
            "received_at_ns": pa.array([1] * n, pa.int64()),
            "attempt_id": [f"a-{e}" for e in ids],
            "message": [os.urandom(MESSAGE_BYTES) for _ in range(n)],
        },
        schema=RAW_SCHEMA,
    )


def whole_table(layout: LakeLayout, chosen: list[str]) -> dict[str, Any]:
    """One `whole_table` leg: a fresh dataset over the Delta table (untimed), then a filtered
    read per episode."""
    from deltalake import DeltaTable

    whole = DeltaTable(layout.raw).to_pyarrow_dataset()
    started = time.perf_counter()
    rows = 0
    for e in chosen:
        rows += whole.to_table(columns=["message"], filter=pc.field("episode_id") == e).num_rows
    return {"ms_per_episode": (time.perf_counter() - started) * 1e3 / len(chosen), "rows": rows}


def planned_files(layout: LakeLayout, chosen: list[str]) -> dict[str, Any]:
    """One `planned_files` leg: the plan's pass (timed apart), then per episode a dataset of
    only its files and a filtered read."""
    started = time.perf_counter()
    files = raw_files_of(layout, chosen)
    plan_s = time.perf_counter() - started
    filesystem, base = table_filesystem(layout.raw)
    started = time.perf_counter()
    rows = 0
    for e in chosen:
        dataset = pads.dataset([f"{base}/{f}" for f in files[e]], format="parquet", filesystem=filesystem)
        rows += dataset.to_table(columns=["message"], filter=pc.field("episode_id") == e).num_rows
    return {
        "ms_per_episode": (time.perf_counter() - started) * 1e3 / len(chosen),
        "rows": rows,
        "plan_s": plan_s,
        "files_per_episode": sum(len(files[e]) for e in chosen) / len(chosen),
    }


def measure(root: Path, groups: int, repeats: int) -> dict[str, Any]:
    layout = LakeLayout(str(root))
    writer = LakeWriter(layout, writer_id="bench")
    started = time.perf_counter()
    for g in range(groups):
        writer.write_raw(_group(g))
    write_s = time.perf_counter() - started
    everyone = sorted(
        pc.unique(pads.dataset(layout.raw).to_table(columns=["episode_id"]).column("episode_id")).to_pylist()
    )
    step = max(1, len(everyone) // SAMPLED)
    chosen = everyone[::step][:SAMPLED]
    runs: dict[str, list[dict[str, Any]]] = {leg: [] for leg in LEGS}
    order = []
    for repeat, leg in interleaved(LEGS, repeats):
        run = whole_table(layout, chosen) if leg == "whole_table" else planned_files(layout, chosen)
        if run["rows"] != len(chosen) * MESSAGES:
            raise AssertionError(
                f"{leg} repeat {repeat}: {run['rows']} rows, {len(chosen) * MESSAGES} expected"
            )
        runs[leg].append(run)
        order.append(leg)
        print(f"  {groups} files, repeat {repeat}: {leg} {run['ms_per_episode']:.2f} ms/episode", flush=True)
    whole = [r["ms_per_episode"] for r in runs["whole_table"]]
    planned = [r["ms_per_episode"] for r in runs["planned_files"]]
    files_per_episode = {r["files_per_episode"] for r in runs["planned_files"]}
    return {
        "groups": groups,
        "raw_files": groups,
        "episodes": groups * EPISODES_PER_GROUP,
        "raw_mb": round(sum(p.stat().st_size for p in Path(layout.raw).rglob("*.parquet")) / 1e6, 1),
        "write_s": round(write_s, 1),
        "sampled_episodes": len(chosen),
        "order": order,
        "whole_table_ms_per_episode": spread(whole, what="whole_table ms/episode").to_json(),
        "planned_files_ms_per_episode": spread(planned, what="planned_files ms/episode").to_json(),
        "plan_s_for_the_sample": spread(
            [r["plan_s"] for r in runs["planned_files"]], what="plan s"
        ).to_json(),
        "whole_over_planned": ratio(whole, planned, what="whole_table / planned_files").to_json(),
        "files_per_episode": files_per_episode.pop()
        if len(files_per_episode) == 1
        else sorted(files_per_episode),
    }


def draw(results: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    xs = [r["raw_files"] for r in results]
    for key, label in (
        ("whole_table_ms_per_episode", "filter the whole raw table"),
        ("planned_files_ms_per_episode", "read the planned files"),
    ):
        med = [r[key]["median"] for r in results]
        low = [r[key]["median"] - r[key]["min"] for r in results]
        high = [r[key]["max"] - r[key]["median"] for r in results]
        ax.errorbar(xs, med, yerr=[low, high], fmt="o-", capsize=4, label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("raw files in the table")
    ax.set_ylabel("ms per episode (median, min–max)")
    repeats = results[0]["whole_over_planned"]["repeats"]
    ax.set_title(f"backfill: finding one episode's raw rows ({repeats} interleaved repeats)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--groups", type=int, nargs="+", default=[50, 200, 800])
    parser.add_argument("--repeats", type=int, default=MIN_REPEATS, help=f">= {MIN_REPEATS}")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/lifecycle/results"))
    args = parser.parse_args()
    if args.repeats < MIN_REPEATS:
        parser.error(f"--repeats must be >= {MIN_REPEATS}")
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    load_start = [round(x, 2) for x in os.getloadavg()]
    results = []
    for groups in args.groups:
        with tempfile.TemporaryDirectory(dir=args.out) as tmp:
            result = measure(Path(tmp) / "lake", groups, args.repeats)
        results.append(result)
        w, p = result["whole_table_ms_per_episode"], result["planned_files_ms_per_episode"]
        print(
            f"{groups:>5} raw files: whole table {w['median']:>8.2f} ({w['min']:.2f}–{w['max']:.2f}) "
            "ms/episode, "
            f"planned files {p['median']:>6.2f} ({p['min']:.2f}–{p['max']:.2f}) ms/episode, "
            f"ratio {result['whole_over_planned']['median']:.0f}x "
            f"(plan {result['plan_s_for_the_sample']['median']:.2f} s once)",
            flush=True,
        )
    doc = {
        "benchmark": "lifecycle.backfill_raw",
        "machine": {
            "cpu_count": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "load_average": load_start,
            "load_average_end": [round(x, 2) for x in os.getloadavg()],
            "shared": "a shared machine: other work ran beside this benchmark (see load_average); "
            "compare the two legs within one size and repeat, not across machines",
        },
        "config": {
            "episodes_per_group": EPISODES_PER_GROUP,
            "messages": MESSAGES,
            "message_bytes": MESSAGE_BYTES,
            "sampled_episodes": SAMPLED,
            "repeats": args.repeats,
            "legs": list(LEGS),
        },
        "cache": "warm page cache (files just written)",
        "figures": "each leg's ms/episode and the plan's s: median and min–max over the repeats; "
        "whole_over_planned: per-repeat ratio of the two legs, interleaved (benchmarks._figures)",
        "results": results,
        "wall_s": round(time.monotonic() - started, 1),
    }
    (args.out / "backfill_raw.json").write_text(json.dumps(doc, indent=2) + "\n")
    draw(results, args.out / "backfill_raw.png")
    print(f"wrote {args.out / 'backfill_raw.json'} and .png in {doc['wall_s']:.0f} s")


if __name__ == "__main__":
    main()
