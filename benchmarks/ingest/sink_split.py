"""Where the stream sink's per-episode Python CPU goes, without Kafka or Flink (issue 35 item 2).

Runs, in this process, what the sink's Python worker does with one episode after the messages
arrive: parse each wire chunk (`decode_chunk`), assemble, the contract check, `featurize`
(transcode + the verification decode + steps/proprio tables and statistics) and the raw (bronze)
rows, timing each stage in CPU time (`time.process_time`: every thread of this process), beside
the transcoding alone (the `transcode` leg of `benchmarks.ingest.cpu`) on the same episodes.
What it cannot see (the PyFlink harness, the JVM, the Delta commit) is the process-tree figure
of `benchmarks.ingest.cpu` less these. Prints a table, writes DIR/ingest_sink_split.json.

    python -m benchmarks.ingest.sink_split --episodes 8 --repeats 3 --out benchmarks/ingest/results
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from benchmarks.ingest.cpu import _episodes, transcode_leg

HERE = Path(__file__).resolve().parent


def sink_stages(count: int, duration_s: float, seed: int) -> dict[str, float]:
    """CPU seconds per stage of the sink's per-episode Python work over `count` episodes."""
    from pi_format.wire import EpisodeAssembler, decode_chunk, encode_episode
    from pi_jobs.stream._records import SourceMessage, raw_rows
    from pi_jobs.stream.contract import check_episode, load_registry
    from pi_jobs.stream.featurize import FeaturizeConfig, featurize
    from pi_jobs.stream.featurize import _verify_chunks as verify

    # the module (the package's `featurize` attribute is the function of that name)
    featurize_module: Any = sys.modules["pi_jobs.stream.featurize"]
    config = FeaturizeConfig()
    registry = load_registry(None)
    episodes = _episodes(count, duration_s, seed)
    wires = [encode_episode(e) for e in episodes]
    verify_s = [0.0]

    lock = threading.Lock()

    def timed_verify(*args: Any, **kwargs: Any) -> None:
        # its own thread's CPU: featurize runs the cameras in threads, side by side
        t = time.thread_time()
        try:
            verify(*args, **kwargs)
        finally:
            with lock:
                verify_s[0] += time.thread_time() - t

    stages = {"parse": 0.0, "assemble_and_check": 0.0, "featurize": 0.0, "raw_rows": 0.0}
    featurize_module._verify_chunks = timed_verify
    try:
        for episode, wire in zip(episodes, wires, strict=True):
            t = time.process_time()
            chunks = [decode_chunk(m) for m in wire]
            stages["parse"] += time.process_time() - t
            t = time.process_time()
            assembler = EpisodeAssembler(episode.episode_id)
            for c in chunks:
                assembler.add(c)
            assembled = assembler.assemble()
            check_episode(assembled, registry)
            stages["assemble_and_check"] += time.process_time() - t
            t = time.process_time()
            featurize(
                assembled,
                attempt_id=str(uuid.uuid4()),
                received_at_ns=time.time_ns(),
                raw_size_bytes=sum(len(m) for m in wire),
                committed_at_ns=time.time_ns(),
                config=config,
            )
            stages["featurize"] += time.process_time() - t
            t = time.process_time()
            messages = [
                SourceMessage("raw", 0, i, time.time_ns(), episode.episode_id, m) for i, m in enumerate(wire)
            ]
            raw_rows(messages, "attempt", [c.chunk_index for c in chunks])
            stages["raw_rows"] += time.process_time() - t
    finally:
        featurize_module._verify_chunks = verify
    stages["verify_decode"] = verify_s[0]
    stages["featurize_less_verify"] = stages["featurize"] - verify_s[0]
    return stages


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--episodes", type=int, default=8)
    parser.add_argument("--duration-s", type=float, default=4.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=HERE / "results")
    args = parser.parse_args()
    runs: list[dict[str, float]] = []
    for repeat in range(args.repeats):  # interleaved: the sink's stages, then the transcode alone
        stages = sink_stages(args.episodes, args.duration_s, seed=repeat)
        stages["transcode_alone"] = transcode_leg(args.episodes, args.duration_s, seed=repeat)["cpu_s"]
        runs.append({k: 1000 * v / args.episodes for k, v in stages.items()})
        print(f"repeat {repeat}: " + ", ".join(f"{k} {v:.1f}" for k, v in runs[-1].items()), flush=True)
    summary = {
        k: {
            "median": statistics.median(r[k] for r in runs),
            "min": min(r[k] for r in runs),
            "max": max(r[k] for r in runs),
        }
        for k in runs[0]
    }
    print("\nCPU ms per episode (median, min-max):")
    for k, v in summary.items():
        print(f"  {k:24s} {v['median']:7.1f} ({v['min']:.1f}-{v['max']:.1f})")
    args.out.mkdir(parents=True, exist_ok=True)
    doc = {
        "episodes": args.episodes,
        "duration_s": args.duration_s,
        "repeats": runs,
        "cpu_ms_per_episode": summary,
    }
    (args.out / "ingest_sink_split.json").write_text(json.dumps(doc, indent=2))


if __name__ == "__main__":
    main()
