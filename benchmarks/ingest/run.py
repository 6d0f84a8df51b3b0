"""Ingest benchmark: throughput of the PyFlink stream job and freshness.

Freshness = seconds from the moment an episode's last chunk is acknowledged by the broker to
the moment `pi_loader.Dataset` can read it. The stream job runs continuously (as
`pilake stream` does in production) in its own process; episodes are uploaded one at a time
for freshness, then as a burst for throughput (MB/s of wire bytes, first send to last
end-to-end ack). Prints a table, writes results/ingest.json and results/ingest.png.

    python benchmarks/ingest/run.py --burst 12 --fresh 4
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

HERE = Path(__file__).resolve().parent


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


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--burst", type=int, default=12, help="episodes uploaded at once for MB/s")
    parser.add_argument("--fresh", type=int, default=4, help="episodes uploaded one by one")
    parser.add_argument("--duration-s", type=float, default=4.0)
    parser.add_argument("--out", type=Path, default=HERE / "results")
    args = parser.parse_args()

    from pi_ingest.simulator import SimulationConfig, simulate_episode
    from pi_ingest.uploader import Uploader, UploaderConfig
    from pi_jobs.local.stack import ensure_topics, start_broker, stop_broker
    from pi_jobs.settings import Settings

    args.out.mkdir(parents=True, exist_ok=True)
    home = args.out / "home"
    env = dict(os.environ, PILAKE_HOME=str(home), PILAKE_BROKER_PORT="19192", OPENBLAS_NUM_THREADS="1")
    settings = Settings.from_env(env)
    start_broker(settings)
    ensure_topics(settings.bootstrap_servers)
    seed = int(time.time()) % 1_000_000
    sim = SimulationConfig(robots=1, episodes_per_robot=args.fresh + args.burst + 1,
                           duration_s=args.duration_s, seed=seed)
    job = subprocess.Popen([sys.executable, "-m", "pi_jobs.cli", "stream", "--max-runtime-s", "900"], env=env)
    results: dict[str, object] = {"seed": seed, "episode_duration_s": args.duration_s}
    try:
        config = UploaderConfig(bootstrap_servers=settings.bootstrap_servers, spool_dir=home / "spool")
        with Uploader(config) as uploader:
            t = time.monotonic()
            warm = simulate_episode(sim, 0, 0).episode
            uploader.submit(warm)
            uploader.send_pending()
            _wait_readable(settings.lake_root, warm.episode_id, 300)
            results["job_start_to_first_episode_s"] = round(time.monotonic() - t, 2)
            print(f"stream job up; first episode readable after {results['job_start_to_first_episode_s']} s")

            freshness: list[float] = []
            for i in range(1, args.fresh + 1):
                episode = simulate_episode(sim, 0, i).episode
                uploader.submit(episode)
                uploader.send_pending()  # returns once the broker acknowledged every chunk
                sent = time.monotonic()
                freshness.append(round(_wait_readable(settings.lake_root, episode.episode_id, 120) - sent, 3))
                print(f"freshness {episode.episode_id}: {freshness[-1]} s")
            results["freshness_s"] = freshness

            first = args.fresh + 1
            burst = [simulate_episode(sim, 0, i).episode for i in range(first, first + args.burst)]
            size = sum(uploader.submit(e).size_bytes for e in burst)
            start = time.monotonic()
            uploader.send_pending()
            report = uploader.run_until_confirmed(timeout_s=600)
            elapsed = time.monotonic() - start
            results["burst"] = {
                "episodes": len(burst),
                "mb": round(size / 1e6, 2),
                "seconds": round(elapsed, 2),
                "mb_per_s": round(size / 1e6 / elapsed, 2),
                "episodes_per_s": round(len(burst) / elapsed, 2),
                "pending": len(report.pending),
            }
    finally:
        job.send_signal(signal.SIGINT)
        try:
            job.wait(60)
        except subprocess.TimeoutExpired:
            job.kill()
        stop_broker(settings)
    print("\n| figure | value |\n| --- | --- |")
    print(f"| first episode readable after job start | {results['job_start_to_first_episode_s']} s |")
    fr = sorted(freshness)
    print(f"| freshness (last chunk acked -> readable), median | {fr[len(fr) // 2]} s (all: {fr}) |")
    b = results["burst"]
    print(f"| burst throughput | {b['mb_per_s']} MB/s, {b['episodes_per_s']} episodes/s ({b['mb']} MB) |")  # type: ignore[index]
    (args.out / "ingest.json").write_text(json.dumps(results, indent=2))
    _plot(results, args.out / "ingest.png")
    print(f"wrote {args.out / 'ingest.json'} and {args.out / 'ingest.png'}")
    return 0


def _plot(results: dict[str, object], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.5))
    fr = results["freshness_s"]
    a.bar(range(len(fr)), fr, color="tab:blue")  # type: ignore[arg-type]
    a.set(title="freshness per episode", xlabel="episode", ylabel="seconds to readable")
    burst = results["burst"]
    b.bar(["MB/s", "episodes/s"], [burst["mb_per_s"], burst["episodes_per_s"]], color="tab:green")  # type: ignore[index]
    b.set(title=f"burst of {burst['episodes']} episodes")  # type: ignore[index]
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
