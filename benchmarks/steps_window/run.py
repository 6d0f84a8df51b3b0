"""Bytes and CPU a cold sample costs against the episode's length: steps in row groups of 64
steps (SPEC.md §7.8, since 2026-11-24) side by side with one row group per episode (before).

    python -m benchmarks.steps_window.run                   # 2, 12 and 60 s episodes, 224 px
    python -m benchmarks.steps_window.run --quick           # 2 and 12 s, 96 px (a minute)

For each episode duration one episode is simulated and featurized once (the stream job's code:
50 Hz steps, three 15 fps cameras re-encoded at `--px`), and two lakes of `--episodes` copies of
it under new ids are written through `LakeWriter.commit_episodes` in group commits of 50: one
with the default steps row groups, one with a row group per episode (`steps_group_steps` larger
than any episode, the layout lakes written before have). On each lake, a host is warmed first
(one sample per file builds this host's steps and chunk indexes, as any first reader does), then
a fresh `Dataset` (cold per-process caches) reads `--samples` samples, one `Dataset.samples`
batch of 32 at a time, each a random step of a different episode: what a shuffled loader's
sample costs on a lake far larger than its caches (every read a miss; the lake's files sit in
the page cache here, so CPU excludes disk waits). Measured: bytes read per sample
(`Dataset.read_stats`) split into steps and video, steps row groups read per sample, and process
CPU per sample: the median and spread of `--repeats` (>= 3) runs, the two layouts interleaved
(`benchmarks._figures`), and their ratio repeat by repeat. The encoded video rows
holding the returned frames (`benchmarks.scale._probe.encoded_sizes`) are the yardstick of
issue 11's bytes-per-sample target (<= 1.5x). Writes OUT/steps_window.json and
OUT/steps_window.png; prints a table.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._figures import MIN_REPEATS, interleaved, ratio, spread, text_of

HERE = Path(__file__).resolve().parent
ONE_GROUP_PER_EPISODE = 1 << 30
HORIZON = 50
BATCH = 32


def template(duration_s: float, px: int, seed: int) -> Any:
    """One simulated episode through the stream job's featurize (pi_format.lake.EpisodeRows):
    the scale benchmark's template, at this duration and frame size."""
    from benchmarks.scale._grow import GrowConfig, template_rows

    return template_rows(GrowConfig(sizes=(1,), duration_s=duration_s, size_px=px, seed=seed))


def write_lake(root: Path, rows: Any, episodes: int, group_steps: int) -> None:
    from pi_format.lake import LakeLayout, LakeWriter

    from benchmarks.scale._grow import GrowConfig, episode_copy

    writer = LakeWriter(LakeLayout(str(root)), writer_id="steps-window", steps_group_steps=group_steps)
    config = GrowConfig(sizes=(episodes,))
    for first in range(0, episodes, 50):
        writer.commit_episodes(
            [episode_copy(rows, i, config) for i in range(first, min(first + 50, episodes))]
        )


def cold_samples(count: int, episodes: int, samples: int, seed: int) -> np.ndarray:
    """`samples` flat sample numbers of a lake of `episodes` copies of `count` samples each: a
    random step of each of `samples` distinct episodes, in random order, so that no sample finds
    what another read in a cache (a lake far larger than the caches)."""
    if count % episodes:
        raise ValueError(f"{count} samples are not {episodes} episodes of equal length")
    rng = np.random.default_rng(seed)
    steps = count // episodes
    chosen = rng.permutation(episodes)[:samples]
    return np.asarray(chosen * steps + rng.integers(0, steps, len(chosen)), np.int64)


def measure(root: Path, episodes: int, samples: int, seed: int) -> dict[str, Any]:
    """One cold pass (fresh Dataset, this host's indexes in place) over `samples` samples."""
    from pi_loader import Dataset, SampleSpec

    spec = SampleSpec(action_horizon=HORIZON)
    ds = Dataset(str(root), spec=spec, seed=seed)
    order = cold_samples(len(ds), episodes, samples, seed)
    cpu = time.process_time()
    for first in range(0, samples, BATCH):
        ds.samples(order[first : first + BATCH])
    cpu = time.process_time() - cpu
    stats = ds.read_stats
    return {
        "samples": samples,
        "bytes_read_per_sample": stats["bytes_read"] / samples,
        "steps_reads_per_sample": stats["steps_reads"] / samples,
        "video_reads_per_sample": stats["video_reads"] / samples,
        "footer_reads": stats["footer_reads"],
        "cpu_ms_per_sample": 1000 * cpu / samples,
    }


def steps_bytes(root: Path, episodes: int, samples: int, seed: int) -> float:
    """Bytes per sample of the steps reads alone (no cameras asked for), cold caches."""
    from pi_loader import Dataset, SampleSpec

    ds = Dataset(str(root), spec=SampleSpec(cameras=(), action_horizon=HORIZON), seed=seed)
    order = cold_samples(len(ds), episodes, samples, seed)
    for first in range(0, samples, BATCH):
        ds.samples(order[first : first + BATCH])
    return float(ds.read_stats["bytes_read"] / samples)


def warm_host(root: Path, episodes: int) -> None:
    """Index every steps and video file of the lake on this host (a sample of every 25th
    episode: each group commit's files are 50 episodes')."""
    from pi_loader import Dataset

    ds = Dataset(str(root), action_horizon=HORIZON)
    steps = len(ds) // episodes
    ds.samples(np.arange(0, episodes, 25) * steps)


def run(args: argparse.Namespace) -> dict[str, Any]:
    from benchmarks.scale._probe import encoded_sizes

    work = Path(tempfile.mkdtemp(prefix="steps-window-", dir=args.work))
    layouts = {"groups_of_64": None, "one_per_episode": ONE_GROUP_PER_EPISODE}
    out: dict[str, Any] = {
        "benchmark": "steps_window",
        "config": vars(args) | {"work": str(work)},
        "durations": [],
    }
    try:
        for duration in args.durations:
            t = time.monotonic()
            rows = template(duration, args.px, args.seed)
            steps = rows.steps.num_rows
            print(
                f"{duration:g} s episode ({steps} steps, {args.px} px) featurized in "
                f"{time.monotonic() - t:.1f} s",
                flush=True,
            )
            entry: dict[str, Any] = {"duration_s": duration, "steps_per_episode": steps, "layouts": {}}
            for name, group_steps in layouts.items():
                lake = work / f"{duration:g}s-{name}"
                write_lake(lake, rows, args.episodes, group_steps or 64)
                warm_host(lake, args.episodes)
                entry["layouts"][name] = {"runs": []}
            samples = min(args.samples, args.episodes)
            for repeat, name in interleaved(list(layouts), args.repeats):
                lake = work / f"{duration:g}s-{name}"
                run = measure(lake, args.episodes, samples, args.seed + repeat)
                entry["layouts"][name]["runs"].append(run)
            encoded = encoded_sizes(work / f"{duration:g}s-groups_of_64", max_episodes=3, contiguous=True)
            chunk = float(encoded["chunk_bytes_per_sample"])
            entry["encoded_chunk_bytes_per_sample"] = chunk
            for name in layouts:
                lake = work / f"{duration:g}s-{name}"
                entry["layouts"][name]["steps_bytes_per_sample"] = steps_bytes(
                    lake, args.episodes, samples, args.seed
                )
            summarize(entry)
            for name in layouts:
                summary = entry["layouts"][name]
                print(
                    f"  {name:16s} {summary['bytes_read_per_sample'] / 1000:8.1f} kB/sample "
                    f"({summary['steps_bytes_per_sample'] / 1000:.1f} kB of steps, "
                    f"{summary['steps_reads_per_sample']:.2f} row groups), "
                    f"{summary['read_vs_encoded_chunks']:.2f}x the encoded chunks ({chunk / 1000:.1f} kB); "
                    f"CPU {text_of(summary['cpu_ms_per_sample'], '{:.2f}')} ms/sample",
                    flush=True,
                )
            print(f"  CPU groups / one per episode: {text_of(entry['cpu_groups_vs_one_per_episode'])}")
            out["durations"].append(entry)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return out


def summarize(entry: dict[str, Any]) -> dict[str, Any]:
    """Fill one duration's figures from its runs (in repeat order, the layouts interleaved):
    bytes and row groups per sample (the same every run: the first), CPU per sample as a
    median with its spread, and `cpu_groups_vs_one_per_episode`, the two layouts' CPU ratio
    repeat by repeat. Needs `encoded_chunk_bytes_per_sample` and each layout's
    `steps_bytes_per_sample` in `entry`.

    Raises:
        FiguresError: fewer than 3 repeats.
    """
    chunk = float(entry["encoded_chunk_bytes_per_sample"])
    cpu: dict[str, list[float]] = {}
    for name, layout in entry["layouts"].items():
        runs = layout["runs"]
        cpu[name] = [float(r["cpu_ms_per_sample"]) for r in runs]
        layout["bytes_read_per_sample"] = runs[0]["bytes_read_per_sample"]
        layout["steps_reads_per_sample"] = runs[0]["steps_reads_per_sample"]
        layout["cpu_ms_per_sample"] = spread(cpu[name], what=f"{name} CPU ms per sample").to_json()
        layout["footer_reads"] = [r["footer_reads"] for r in runs]  # 0: the host was warm
        layout["read_vs_encoded_chunks"] = round(layout["bytes_read_per_sample"] / chunk, 3)
    entry["cpu_groups_vs_one_per_episode"] = ratio(
        cpu["groups_of_64"], cpu["one_per_episode"], what="CPU per sample, groups of 64 / one per episode"
    ).to_json()
    return entry


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    durations = result["durations"]
    labels = [f"{d['duration_s']:g} s\n({d['steps_per_episode']} steps)" for d in durations]
    x = np.arange(len(durations))
    fig, ax = plt.subplots(figsize=(7, 4))
    for offset, (name, color) in (
        (-0.2, ("one_per_episode", "tab:red")),
        (0.2, ("groups_of_64", "tab:blue")),
    ):
        steps = [d["layouts"][name]["steps_bytes_per_sample"] / 1000 for d in durations]
        total = [d["layouts"][name]["bytes_read_per_sample"] / 1000 for d in durations]
        ax.bar(x + offset, total, 0.38, color=color, alpha=0.35)
        ax.bar(x + offset, steps, 0.38, color=color, label=f"{name.replace('_', ' ')} (solid: steps)")
    ax.plot(
        x,
        [1.5 * d["encoded_chunk_bytes_per_sample"] / 1000 for d in durations],
        "k--",
        label="1.5x encoded chunks",
    )
    ax.set_xticks(x, labels)
    ax.set_ylabel("kB read per cold sample")
    ax.set_title("Bytes per sample against episode length (light: steps + video)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="2 and 12 s episodes at 96 px")
    parser.add_argument("--durations", default=None, help="comma-separated episode durations (s)")
    parser.add_argument("--px", type=int, default=None)
    parser.add_argument("--episodes", type=int, default=500, help="copies per lake")
    parser.add_argument("--samples", type=int, default=500, help="at most one per episode")
    parser.add_argument("--repeats", type=int, default=MIN_REPEATS, help=f">= {MIN_REPEATS}, interleaved")
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--work", default=None, help="where the lakes are written (temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the lakes")
    parser.add_argument("--out", type=Path, default=HERE / "results")
    args = parser.parse_args()
    if args.repeats < MIN_REPEATS:
        parser.error(f"--repeats must be >= {MIN_REPEATS} (a median with its spread), got {args.repeats}")
    args.durations = [float(d) for d in (args.durations or ("2,12" if args.quick else "2,12,60")).split(",")]
    args.px = args.px or (96 if args.quick else 224)
    result = run(args)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "steps_window.json").write_text(json.dumps(result, indent=1, default=str))
    plot(result, args.out / "steps_window.png")
    print(f"wrote {args.out / 'steps_window.json'} and {args.out / 'steps_window.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
