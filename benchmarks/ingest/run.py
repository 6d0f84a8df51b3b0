"""Ingest benchmark: throughput of the PyFlink stream job and freshness.

Freshness = seconds from the moment an episode's last chunk is acknowledged by the broker to
the moment `pi_loader.Dataset` can read it (polled every 50 ms by opening a Dataset, which
costs CPU the job shares on a small machine); next to it, what the sink itself records in the
catalog (`pilake freshness`: the Kafka timestamp of the last chunk to the return of the catalog
record, no polling). The stream job runs continuously (as
`pilake stream` does in production) in its own process; episodes are uploaded one at a time
for freshness, then as a burst for throughput (MB/s of wire bytes, first send to last
end-to-end ack). With several parallelisms, each runs `--repeats` times (at least 3), the
parallelisms interleaved (order rotated each repeat, a fresh home and broker each run); the
speed-up is the median and spread of the per-repeat ratios, and a target is met only when the
whole spread clears it (`benchmarks._figures`). Prints a table, writes results/ingest.json and
results/ingest.png.

    python benchmarks/ingest/run.py --burst 12 --fresh 4
    python benchmarks/ingest/run.py --burst 24 --fresh 20 --parallelism 1,2   # issue 11's figures
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
if str(ROOT) not in sys.path:  # run as a script: `python benchmarks/ingest/run.py`
    sys.path.insert(0, str(ROOT))

from benchmarks._figures import MIN_REPEATS, interleaved, judge, ratio, spread, text_of  # noqa: E402


def _wait_readable(lake: str, episode_id: str, timeout_s: float) -> float:
    from pi_loader import Dataset

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if len(Dataset(lake, episode_ids=[episode_id])) > 0:
                return time.monotonic()
        except Exception:  # not committed yet: the loader refuses unknown episodes
            pass
        time.sleep(0.05)
    raise TimeoutError(f"episode {episode_id} not readable within {timeout_s}s")


def _run_once(parallelism: int, args: argparse.Namespace, seed: int, repeat: int = 0) -> dict[str, object]:
    """One stream job at `parallelism` on a fresh home and broker: freshness, then a burst."""
    from pi_ingest.simulator import SimulationConfig, simulate_episode
    from pi_ingest.uploader import Uploader, UploaderConfig
    from pi_jobs.local.stack import ensure_topics, start_broker
    from pi_jobs.settings import Settings

    home = args.out / f"home-p{parallelism}-r{repeat}"
    env = dict(os.environ, PILAKE_HOME=str(home), PILAKE_BROKER_PORT="19192", OPENBLAS_NUM_THREADS="1")
    settings = Settings.from_env(env)
    start_broker(settings)
    ensure_topics(settings.bootstrap_servers)
    sim = SimulationConfig(
        robots=1, episodes_per_robot=args.fresh + args.burst + 1, duration_s=args.duration_s, seed=seed
    )
    job = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pi_jobs.cli",
            "stream",
            "--max-runtime-s",
            "1800",
            "--parallelism",
            str(parallelism),
            *(
                ["--group-commit-delay-ms", str(args.group_delay_ms)]
                if args.group_delay_ms is not None
                else []
            ),
        ],
        env=env,
    )
    results: dict[str, object] = {"parallelism": parallelism, "repeat": repeat}
    fresh_ids: list[str] = []
    try:
        config = UploaderConfig(bootstrap_servers=settings.bootstrap_servers, spool_dir=home / "spool")
        with Uploader(config) as uploader:
            t = time.monotonic()
            warm = simulate_episode(sim, 0, 0).episode
            uploader.submit(warm)
            uploader.send_pending()
            _wait_readable(settings.lake_root, warm.episode_id, 300)
            results["job_start_to_first_episode_s"] = round(time.monotonic() - t, 2)
            first_s = results["job_start_to_first_episode_s"]
            print(f"p={parallelism}: first episode readable after {first_s} s")

            freshness: list[float] = []
            for i in range(1, args.fresh + 1):
                episode = simulate_episode(sim, 0, i).episode
                fresh_ids.append(episode.episode_id)
                uploader.submit(episode)
                uploader.send_pending()  # returns once the broker acknowledged every chunk
                sent = time.monotonic()
                freshness.append(round(_wait_readable(settings.lake_root, episode.episode_id, 120) - sent, 3))
                print(f"p={parallelism}: freshness {episode.episode_id}: {freshness[-1]} s")
            results["freshness_s"] = freshness
            fr = sorted(freshness)
            results["freshness_p50_s"] = fr[len(fr) // 2]
            results["freshness_p95_s"] = fr[min(len(fr) - 1, round(0.95 * (len(fr) - 1)))]

            first = args.fresh + 1
            burst = [simulate_episode(sim, 0, i).episode for i in range(first, first + args.burst)]
            size = sum(uploader.submit(e).size_bytes for e in burst)
            start, cpu_before = time.monotonic(), _cpu_times()
            uploader.send_pending()
            report = uploader.run_until_confirmed(timeout_s=900)
            elapsed, cpu_after = time.monotonic() - start, _cpu_times()
            results["burst"] = {
                "episodes": len(burst),
                "mb": round(size / 1e6, 2),
                "seconds": round(elapsed, 2),
                "mb_per_s": round(size / 1e6 / elapsed, 2),
                "episodes_per_s": round(len(burst) / elapsed, 2),
                "pending": len(report.pending),
                # the whole machine (broker, Flink JVM, Python workers, uploader, this process):
                # near 1.0, a second sink subtask has no core left to run on
                "machine_cpu_busy": _busy_fraction(cpu_before, cpu_after),
            }
    finally:
        stop_stream_job(job, settings)
    results.update(_recorded_freshness(settings.catalog_path, fresh_ids))
    return results


def stop_stream_job(job: subprocess.Popen[bytes], settings: Any) -> None:
    """Stop a `pilake stream` process as Ctrl-C would (killed after 60 s), then its broker."""
    from pi_jobs.local.stack import stop_broker

    job.send_signal(signal.SIGINT)
    try:
        job.wait(60)
    except subprocess.TimeoutExpired:
        job.kill()
    stop_broker(settings)


def _cpu_times() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs since boot, from /proc/stat."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields) - idle, sum(fields)


def _busy_fraction(before: tuple[int, int], after: tuple[int, int]) -> float:
    total = after[1] - before[1]
    return round((after[0] - before[0]) / total, 3) if total else 0.0


def _recorded_freshness(catalog_path: str, episode_ids: list[str]) -> dict[str, object]:
    """The sink's own freshness records of `episode_ids` (pi_jobs.ops.freshness), p50/p95."""
    from pi_catalog import Catalog
    from pi_jobs.ops.freshness import read_freshness

    rows = read_freshness(Catalog(catalog_path), since_s=86_400)
    wanted = set(episode_ids)
    latencies = sorted(
        round((r - p) / 1e9, 3)
        for e, p, r in zip(rows.episode_ids, rows.published_at_ns, rows.readable_at_ns, strict=True)
        if e in wanted and p is not None
    )
    if not latencies:
        return {"recorded_freshness_s": []}
    return {
        "recorded_freshness_s": latencies,
        "recorded_freshness_p50_s": latencies[len(latencies) // 2],
        "recorded_freshness_p95_s": latencies[min(len(latencies) - 1, round(0.95 * (len(latencies) - 1)))],
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--burst", type=int, default=12, help="episodes uploaded at once for MB/s")
    parser.add_argument("--fresh", type=int, default=4, help="episodes uploaded one by one")
    parser.add_argument("--duration-s", type=float, default=4.0)
    parser.add_argument(
        "--parallelism",
        default="1",
        help="comma-separated sink parallelisms, run one after another "
        "on the same episodes (e.g. 1,2 for the speed-up)",
    )
    parser.add_argument(
        "--group-delay-ms", type=int, default=None, help="the stream job's --group-commit-delay-ms"
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=MIN_REPEATS,
        help=f"runs per parallelism, interleaved (>= {MIN_REPEATS})",
    )
    parser.add_argument("--out", type=Path, default=HERE / "results")
    args = parser.parse_args()
    parallelisms = [int(p) for p in args.parallelism.split(",")]
    if len(parallelisms) > 1 and args.repeats < MIN_REPEATS:
        parser.error(f"--repeats must be >= {MIN_REPEATS} to compare parallelisms, got {args.repeats}")
    args.out.mkdir(parents=True, exist_ok=True)
    seed = int(time.time()) % 1_000_000
    order = interleaved(parallelisms, args.repeats) if len(parallelisms) > 1 else ((0, parallelisms[0]),)
    runs = [_run_once(p, args, seed, repeat) for repeat, p in order]
    results: dict[str, object] = {
        "seed": seed,
        "episode_duration_s": args.duration_s,
        "cpu_count": os.cpu_count(),
        "group_delay_ms": args.group_delay_ms,
        "runs": runs,
    }
    rates: dict[int, dict[int, float]] = {}
    for r in runs:
        burst: dict[str, float] = r["burst"]  # type: ignore[assignment]
        rates.setdefault(int(r["parallelism"]), {})[int(r["repeat"])] = float(burst["episodes_per_s"])  # type: ignore[call-overload]
    if 1 in rates and 2 in rates and len(set(rates[1]) & set(rates[2])) >= MIN_REPEATS:
        both = sorted(set(rates[1]) & set(rates[2]))
        speedup = ratio([rates[2][k] for k in both], [rates[1][k] for k in both], what="parallelism 2 / 1")
        # every run's p95 under 2 s: the whole spread of the p95s clears the target
        p95 = spread([float(r["freshness_p95_s"]) for r in runs], what="freshness p95")  # type: ignore[arg-type]
        results["episodes_per_s"] = {
            str(p): spread([v[k] for k in sorted(v)], what=f"parallelism {p}").to_json()
            for p, v in rates.items()
        }
        results["speedup_p2_over_p1"] = speedup.to_json()
        results["freshness_p95_s"] = p95.to_json()
        results["targets_detail"] = {
            "p2_at_least_1.6x_p1": judge(speedup, 1.6),
            "freshness_p95_under_2s": judge(p95, 2.0, higher_is_better=False),
        }
        results["targets"] = {name: d["met"] for name, d in results["targets_detail"].items()}  # type: ignore[attr-defined]
    print("\n| parallelism | first episode readable | freshness p50 / p95 | recorded by the sink | burst |")
    print("| --- | --- | --- | --- | --- |")
    for r in runs:
        b: dict[str, object] = r["burst"]  # type: ignore[assignment]
        print(
            f"| {r['parallelism']} | {r['job_start_to_first_episode_s']} s | {r['freshness_p50_s']} / "
            f"{r['freshness_p95_s']} s | {r.get('recorded_freshness_p50_s')} / "
            f"{r.get('recorded_freshness_p95_s')} s "
            f"| {b['mb_per_s']} MB/s, {b['episodes_per_s']} episodes/s, "
            f"CPU {b.get('machine_cpu_busy')} busy |"
        )
    if "speedup_p2_over_p1" in results:
        print(
            f"speed-up of parallelism 2 over 1 (median, min-max of {args.repeats} interleaved runs): "
            f"{text_of(results['speedup_p2_over_p1'])}x; targets {results['targets']}"
        )
    (args.out / "ingest.json").write_text(json.dumps(results, indent=2))
    _plot(runs, args.out / "ingest.png")
    print(f"wrote {args.out / 'ingest.json'} and {args.out / 'ingest.png'}")
    return 0


def _plot(runs: list[dict[str, object]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.5))
    for r in runs:
        fr = r["freshness_s"]
        a.plot(range(len(fr)), fr, marker="o", label=f"parallelism {r['parallelism']}")  # type: ignore[arg-type]
    a.axhline(2.0, color="grey", linestyle="--", linewidth=1)
    a.set(title="freshness per episode (target p95 < 2 s)", xlabel="episode", ylabel="seconds to readable")
    a.legend()
    labels = [f"p={r['parallelism']}" for r in runs]
    b.bar(labels, [r["burst"]["episodes_per_s"] for r in runs], color="tab:green")  # type: ignore[index]
    b.set(title="burst throughput", ylabel="episodes/s")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
