"""How a backfill worker finds an episode's raw rows, against the size of the raw table.

`python -m benchmarks.lifecycle.backfill_raw --groups 50 200 800 --out DIR` builds raw tables
as the stream job leaves them (one raw file per group commit, 32 episodes of 12 messages of
4 kB each, robots interleaved so every file's episode_id range is wide), then times, for the
same 40 episodes, the two ways of reading one episode's rows:

* `whole_table`: a filter on episode_id over the raw table's pyarrow dataset (what the backfill
  did per episode before: statistics prune little, so footers of most files are read);
* `planned_files`: the plan's one pass (`pi_jobs.backfill._raw_files.raw_files_of`, timed
  apart, once per run) and then a read of only the files holding the episode.

Prints a table, writes DIR/backfill_raw.json and DIR/backfill_raw.png. Warm page cache (the
files are small and just written): it measures the per-episode work, not the disk.
"""

from __future__ import annotations

import argparse
import json
import os
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

EPISODES_PER_GROUP = 32
MESSAGES = 12
MESSAGE_BYTES = 4096
SAMPLED = 40


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


def measure(root: Path, groups: int) -> dict[str, Any]:
    layout = LakeLayout(str(root))
    writer = LakeWriter(layout, writer_id="bench")
    for g in range(groups):
        writer.write_raw(_group(g))
    everyone = sorted(
        pc.unique(pads.dataset(layout.raw).to_table(columns=["episode_id"]).column("episode_id")).to_pylist()
    )
    step = max(1, len(everyone) // SAMPLED)
    chosen = everyone[::step][:SAMPLED]
    from deltalake import DeltaTable

    whole = DeltaTable(layout.raw).to_pyarrow_dataset()
    started = time.perf_counter()
    rows_whole = 0
    for e in chosen:
        rows_whole += whole.to_table(columns=["message"], filter=pc.field("episode_id") == e).num_rows
    whole_s = (time.perf_counter() - started) / len(chosen)

    started = time.perf_counter()
    files = raw_files_of(layout, chosen)
    plan_s = time.perf_counter() - started
    filesystem, base = table_filesystem(layout.raw)
    started = time.perf_counter()
    rows_planned = 0
    for e in chosen:
        dataset = pads.dataset([f"{base}/{f}" for f in files[e]], format="parquet", filesystem=filesystem)
        rows_planned += dataset.to_table(columns=["message"], filter=pc.field("episode_id") == e).num_rows
    planned_s = (time.perf_counter() - started) / len(chosen)
    if rows_planned != rows_whole or rows_whole != len(chosen) * MESSAGES:
        raise AssertionError(f"rows differ: whole {rows_whole}, planned {rows_planned}")
    return {
        "groups": groups,
        "raw_files": groups,
        "episodes": groups * EPISODES_PER_GROUP,
        "sampled_episodes": len(chosen),
        "whole_table_ms_per_episode": round(whole_s * 1000, 2),
        "planned_files_ms_per_episode": round(planned_s * 1000, 2),
        "plan_s_for_the_sample": round(plan_s, 3),
        "files_per_episode": sum(len(files[e]) for e in chosen) / len(chosen),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, nargs="+", default=[50, 200, 800])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/lifecycle/results"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    results = []
    for groups in args.groups:
        with tempfile.TemporaryDirectory(dir=args.out) as tmp:
            result = measure(Path(tmp) / "lake", groups)
        results.append(result)
        print(
            f"{groups:>5} raw files: whole table {result['whole_table_ms_per_episode']:>8.2f} ms/episode, "
            f"planned files {result['planned_files_ms_per_episode']:>6.2f} ms/episode "
            f"(plan {result['plan_s_for_the_sample']:.2f} s once)"
        )
    doc = {
        "benchmark": "lifecycle.backfill_raw",
        "machine": {"cpu_count": os.cpu_count(), "load_average": os.getloadavg()},
        "config": {
            "episodes_per_group": EPISODES_PER_GROUP,
            "messages": MESSAGES,
            "message_bytes": MESSAGE_BYTES,
        },
        "cache": "warm page cache (files just written)",
        "results": results,
    }
    (args.out / "backfill_raw.json").write_text(json.dumps(doc, indent=2))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    xs = [r["raw_files"] for r in results]
    ax.plot(xs, [r["whole_table_ms_per_episode"] for r in results], "o-", label="filter the whole raw table")
    ax.plot(xs, [r["planned_files_ms_per_episode"] for r in results], "o-", label="read the planned files")
    ax.set_xlabel("raw files in the table")
    ax.set_ylabel("ms per episode")
    ax.set_title("backfill: finding one episode's raw rows")
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.out / "backfill_raw.png", dpi=120)
    print(f"wrote {args.out / 'backfill_raw.json'} and .png")


if __name__ == "__main__":
    main()
