"""Ingest CPU per episode against the transcoding alone (issue 35, item 2).

Two legs on the same simulated episodes (the fleet simulator's defaults: 3 cameras at 320x240,
30 fps, 50 Hz proprio; `--duration-s` long), interleaved repeat after repeat, each in fresh
processes (`benchmarks._figures`):

- **transcode**: what ingest cannot avoid. A fresh Python process decodes each camera's robot
  video and encodes the lake's training chunks with the stream job's own settings
  (`FeaturizeConfig()`: 224x224, intra-only, CRF 20, one camera per thread), the way
  `pi_jobs.stream.featurize` does, and nothing else: no Kafka, no Flink, no Delta, no
  verification decode. CPU is the process's own (`time.process_time`, every thread) around the
  loop, after the imports and the simulation.
- **ingest**: the real path. A fresh broker and `pilake stream --parallelism 1` in its own
  process (the Flink mini-cluster JVM and its Python worker), warmed with one episode; then the
  episodes go up at once through the real uploader and the leg waits for every ack. CPU is the
  stream job's whole process tree (JVM, Python worker, the CLI process) from the first send to
  the last ack, read from /proc through psutil; the broker's CPU is reported beside it, not in
  the ratio (it is Kafka's cost, paid by any consumer). The same total is split by role (CLI,
  JVM, Python worker) and the JVM's by thread (`benchmarks.ingest._proc_cpu`), over the burst
  and over a 5 s idle window before it.

The figure is CPU ms per episode of each leg and their ratio repeat by repeat (median and
spread); the target (issue 35) is ingest <= 1.3x transcode, met only when the whole spread
clears it. Prints a table, writes DIR/ingest_cpu.json.

    python -m benchmarks.ingest.cpu --episodes 16 --repeats 3 --out benchmarks/ingest/results
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

from benchmarks._figures import MIN_REPEATS, interleaved, judge, ratio, spread
from benchmarks.ingest import _proc_cpu
from benchmarks.ingest.run import stop_stream_job

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
TARGET_RATIO = 1.3
# the ingest leg of each PyFlink execution mode (`pilake stream --python-execution-mode`)
LEG_OF_MODE = {"process": "ingest", "thread": "ingest_thread"}


def _log(message: str) -> None:
    print(f"[ingest_cpu {time.strftime('%H:%M:%S')}] {message}", flush=True)


def _episodes(count: int, duration_s: float, seed: int, *, first: int = 1) -> list[Any]:
    from pi_ingest.simulator import SimulationConfig, simulate_episode

    sim = SimulationConfig(robots=1, episodes_per_robot=first + count, duration_s=duration_s, seed=seed)
    return [simulate_episode(sim, 0, i).episode for i in range(first, first + count)]


def transcode_leg(count: int, duration_s: float, seed: int, warmup: int = 1) -> dict[str, float]:
    """The transcoding alone, in this process: CPU seconds and wall seconds for `count` episodes,
    after `warmup` episodes transcoded the same way and not counted (as the ingest leg's)."""
    from concurrent.futures import ThreadPoolExecutor

    from pi_format.video import ChunkedVideoEncoder, decode_container
    from pi_jobs.stream.featurize import FeaturizeConfig

    config = FeaturizeConfig()
    warm = _episodes(warmup, duration_s, seed, first=0) if warmup else []
    episodes = _episodes(count, duration_s, seed, first=warmup)

    def one_camera(camera: Any) -> int:
        encoder = ChunkedVideoEncoder(
            width=config.video_width,
            height=config.video_height,
            fps=camera.spec.fps,
            chunk_frames=config.chunk_frames,
            crf=config.crf,
            keyframe_interval=config.keyframe_interval,
        )
        chunks = []
        for frame in decode_container(camera.data):
            chunks.extend(encoder.add(frame))
        chunks.extend(encoder.close())
        return sum(len(c.data) for c in chunks)

    def transcode(batch: list[Any]) -> int:
        encoded = 0
        for episode in batch:  # one camera per thread, as featurize's default does
            threads = min(len(episode.cameras), os.cpu_count() or 1)
            with ThreadPoolExecutor(threads) as pool:
                encoded += sum(pool.map(one_camera, episode.cameras))
        return encoded

    transcode(warm)
    cpu, wall = time.process_time(), time.monotonic()
    encoded = transcode(episodes)
    return {
        "cpu_s": time.process_time() - cpu,
        "wall_s": time.monotonic() - wall,
        "encoded_bytes": float(encoded),
    }


def _tree_cpu_s(root_pid: int) -> dict[str, float]:
    """CPU seconds (user + system) of `root_pid` and its descendants, by kind of process: the
    JVM (`java`), Python processes (the CLI and Flink's Python worker) and the rest."""
    import psutil  # type: ignore[import-untyped]

    by_kind: dict[str, float] = {}
    try:
        root = psutil.Process(root_pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return by_kind
    for process in processes:
        try:
            t = process.cpu_times()
            name = process.name()
        except psutil.NoSuchProcess:
            continue
        kind = "jvm" if name.startswith("java") else "python" if name.startswith("python") else name
        by_kind[kind] = by_kind.get(kind, 0.0) + t.user + t.system
    return by_kind


def _python_workers(root_pid: int) -> list[int]:
    """Flink's Python worker processes under the stream job (not the CLI process itself)."""
    import psutil

    return [
        p.pid
        for p in psutil.Process(root_pid).children(recursive=True)
        if p.name().startswith("python") and any("pyflink" in part or "beam" in part for part in p.cmdline())
    ]


def ingest_leg(
    count: int,
    duration_s: float,
    seed: int,
    home: Path,
    py_spy: str | None = None,
    parallelism: int = 1,
    mode: str = "process",
    idle_s: float = 5.0,
    warmup: int = 1,
) -> dict[str, Any]:
    """The stream job on a fresh broker: CPU of its process tree (and of the broker) from the
    first send of `count` episodes to their last ack, after `warmup` episodes sent and acked
    first (not counted). With `py_spy` (the path of a py-spy
    binary) the Python worker is sampled meanwhile, into HOME/py-spy-*.txt (collapsed stacks)."""
    from pi_ingest.uploader import Uploader, UploaderConfig
    from pi_jobs.local.stack import ensure_topics, start_broker
    from pi_jobs.settings import Settings

    env = dict(os.environ, PILAKE_HOME=str(home), PILAKE_BROKER_PORT="19193", OPENBLAS_NUM_THREADS="1")
    settings = Settings.from_env(env)
    broker = start_broker(settings)
    ensure_topics(settings.bootstrap_servers)
    episodes = _episodes(count + warmup, duration_s, seed, first=0)
    warm, burst = episodes[:warmup], episodes[warmup:]
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
            "--python-execution-mode",
            mode,
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        config = UploaderConfig(bootstrap_servers=settings.bootstrap_servers, spool_dir=home / "spool")
        with Uploader(config) as uploader:
            for episode in warm:
                uploader.submit(episode)
            uploader.send_pending()
            warm_deadline = time.monotonic() + 300
            while True:  # until the job is up and warm; a job that gave up fails the leg now
                report = uploader.run_until_confirmed(timeout_s=5)
                if not report.pending:
                    break
                if job.poll() is not None or time.monotonic() > warm_deadline:
                    raise RuntimeError(
                        f"the warm-up episodes were not acknowledged (stream job exit code "
                        f"{job.poll()}; its Flink logs are under {home})"
                    )
            # an idle window first: what the job spends per second with nothing to do
            # (timers, checkpoints, polls, the JIT finishing the warm-up's compiles)
            idle_before = _proc_cpu.snapshot(job.pid)
            time.sleep(idle_s)
            idle = _proc_cpu.difference(idle_before, _proc_cpu.snapshot(job.pid))
            for episode in burst:
                uploader.submit(episode)
            spies = [
                subprocess.Popen(
                    [
                        str(py_spy),
                        "record",
                        "--pid",
                        str(pid),
                        "--rate",
                        "250",
                        "--format",
                        "raw",
                        "--nonblocking",
                        "--output",
                        str(home / f"py-spy-{pid}.txt"),
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                for pid in (_python_workers(job.pid) if py_spy else [])
            ]
            job_before, broker_before = _tree_cpu_s(job.pid), _tree_cpu_s(broker.pid or -1)
            split_before = _proc_cpu.snapshot(job.pid)
            wall = time.monotonic()
            uploader.send_pending()
            report = uploader.run_until_confirmed(timeout_s=900)
            wall = time.monotonic() - wall
            job_after, broker_after = _tree_cpu_s(job.pid), _tree_cpu_s(broker.pid or -1)
            split = _proc_cpu.difference(split_before, _proc_cpu.snapshot(job.pid))
            for spy in spies:
                spy.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
                spy.wait(60)
            by_kind = {k: v - job_before.get(k, 0.0) for k, v in job_after.items()}
            job_cpu = sum(by_kind.values())
            broker_cpu = sum(broker_after.values()) - sum(broker_before.values())
            if report.pending:
                raise RuntimeError(f"{len(report.pending)} episodes were not acknowledged in 900 s")
    finally:
        stop_stream_job(job, settings)
    return {
        "cpu_s": job_cpu,
        "cpu_s_by_process": by_kind,
        "cpu_s_by_role": split["roles"],
        "jvm_cpu_s_by_thread": {k: v for k, v in split["jvm_threads"].items() if abs(v) >= 0.005},
        "broker_cpu_s": broker_cpu,
        "wall_s": wall,
        "idle_s": idle_s,
        "idle_cpu_s_by_role": idle["roles"],
        "idle_jvm_cpu_s_by_thread": {k: v for k, v in idle["jvm_threads"].items() if abs(v) >= 0.005},
    }


def _run_leg(leg: str, args: argparse.Namespace, seed: int, repeat: int) -> dict[str, Any]:
    """One leg in a fresh Python process (its imports and caches its own)."""
    out = args.out / f"{leg}-r{repeat}.json"
    command = [
        sys.executable,
        "-m",
        "benchmarks.ingest.cpu",
        "--leg",
        leg,
        "--modes",
        args.modes,
        "--episodes",
        str(args.episodes),
        "--duration-s",
        str(args.duration_s),
        "--seed",
        str(seed),
        "--out",
        str(args.out),
        "--leg-result",
        str(out),
        "--home",
        str(args.out / f"home-{leg}-r{repeat}"),
        "--parallelism",
        str(args.parallelism),
        "--warmup-episodes",
        str(args.warmup_episodes),
    ]
    if args.py_spy:
        command += ["--py-spy", args.py_spy]
    subprocess.run(command, check=True, cwd=ROOT, env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--episodes", type=int, default=16, help="episodes per leg and repeat")
    parser.add_argument("--duration-s", type=float, default=4.0)
    parser.add_argument("--repeats", type=int, default=MIN_REPEATS)
    parser.add_argument("--out", type=Path, default=HERE / "results")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument(
        "--py-spy", default=None, help="path of a py-spy binary: sample the stream job's Python worker"
    )
    parser.add_argument(
        "--parallelism",
        type=int,
        default=1,
        help="the stream job's sink parallelism in the ingest leg (CPU per episode is per "
        "episode whatever the parallelism; 4 and 8 want a host with the cores)",
    )
    parser.add_argument(
        "--modes",
        default="process",
        help="comma-separated PyFlink execution modes of the stream job, one ingest leg each: "
        "process (a Beam worker process, leg 'ingest'), thread (PEMJA, leg 'ingest_thread')",
    )
    parser.add_argument(
        "--warmup-episodes",
        type=int,
        default=1,
        help="episodes each leg processes first, uncounted: the ingest leg sends them and waits "
        "for their acks (the JVM's JIT and the worker's imports warm on them), the transcode leg "
        "transcodes them in its process; the same simulated episodes for both legs",
    )
    parser.add_argument("--leg", choices=(*LEG_OF_MODE.values(), "transcode"), help=argparse.SUPPRESS)
    parser.add_argument("--leg-result", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--home", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    seed = args.seed if args.seed is not None else int(time.time()) % 1_000_000
    if args.leg is not None:  # one leg, in this fresh process
        result: dict[str, Any]
        if args.leg == "transcode":
            result = dict(transcode_leg(args.episodes, args.duration_s, seed, args.warmup_episodes))
        else:
            mode = next(m for m, leg in LEG_OF_MODE.items() if leg == args.leg)
            result = ingest_leg(
                args.episodes,
                args.duration_s,
                seed,
                args.home,
                args.py_spy,
                args.parallelism,
                mode,
                warmup=args.warmup_episodes,
            )
        args.leg_result.write_text(json.dumps(result))
        return 0
    if args.repeats < MIN_REPEATS:
        parser.error(f"--repeats must be >= {MIN_REPEATS}, got {args.repeats}")
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not modes or any(m not in LEG_OF_MODE for m in modes):
        parser.error(f"--modes must name some of {sorted(LEG_OF_MODE)}, got {args.modes!r}")
    ingest_legs = [LEG_OF_MODE[m] for m in modes]
    load_start = list(os.getloadavg())  # the machine's load beside the figures (1, 5, 15 min)
    runs: list[dict[str, Any]] = []
    failed: dict[str, str] = {}  # a leg that failed once is not run again (nor judged)
    for repeat, leg in interleaved(("transcode", *ingest_legs), args.repeats):
        if leg in failed:
            continue
        _log(f"repeat {repeat}: {leg} leg, {args.episodes} episodes of {args.duration_s:g} s")
        try:
            result = _run_leg(leg, args, seed, repeat)
        except subprocess.CalledProcessError as err:
            if leg == "transcode":
                raise
            failed[leg] = f"repeat {repeat} failed (exit code {err.returncode}; its log is above)"
            _log(f"repeat {repeat}: {leg}: {failed[leg]}; the leg is left out")
            continue
        per_episode_ms = 1000 * result["cpu_s"] / args.episodes
        runs.append({"leg": leg, "repeat": repeat, **result, "cpu_ms_per_episode": per_episode_ms})
        _log(
            f"repeat {repeat}: {leg}: {per_episode_ms:.0f} CPU ms per episode, {result['wall_s']:.1f} s wall"
        )

    def text_of(doc: dict[str, Any]) -> str:
        return f"{doc['median']:.0f} ({doc['min']:.0f}-{doc['max']:.0f})"

    by_leg: dict[str, dict[int, dict[str, Any]]] = {}
    for run in runs:
        by_leg.setdefault(run["leg"], {})[run["repeat"]] = run
    results: dict[str, Any] = {
        "seed": seed,
        "episodes": args.episodes,
        "episode_duration_s": args.duration_s,
        # episodes each leg ran first, not counted (both legs the same ones)
        "warmup_episodes": args.warmup_episodes,
        "parallelism": args.parallelism,
        "cpu_count": os.cpu_count(),
        "modes": modes,
        "runs": runs,
        "load": {"start": load_start, "end": list(os.getloadavg())},
        "targets_detail": {},
    }
    print("\n| leg | CPU ms per episode | broker CPU ms per episode | / transcode |")
    print("| --- | --- | --- | --- |")
    if failed:
        results["failed_legs"] = failed
    for leg in (g for g in ingest_legs if g not in failed):
        # leg "ingest" keeps its key names (ingest_cpu_ms_per_episode, ...); others are prefixed
        repeats = sorted(set(by_leg["transcode"]) & set(by_leg[leg]))
        transcode_ms = [by_leg["transcode"][r]["cpu_ms_per_episode"] for r in repeats]
        ingest_ms = [by_leg[leg][r]["cpu_ms_per_episode"] for r in repeats]
        broker_ms = [1000 * by_leg[leg][r]["broker_cpu_s"] / args.episodes for r in repeats]
        cpu_ratio = ratio(ingest_ms, transcode_ms, what=f"{leg} / transcode CPU per episode")
        results["transcode_cpu_ms_per_episode"] = spread(transcode_ms, what="transcode").to_json()
        results[f"{leg}_cpu_ms_per_episode"] = spread(ingest_ms, what=leg).to_json()
        results[f"{leg}_broker_cpu_ms_per_episode" if leg != "ingest" else "broker_cpu_ms_per_episode"] = (
            spread(broker_ms, what="broker").to_json()
        )
        results[f"{leg}_over_transcode"] = cpu_ratio.to_json()
        results["targets_detail"][f"{leg}_cpu_at_most_{TARGET_RATIO}x_transcode"] = judge(
            cpu_ratio, TARGET_RATIO, higher_is_better=False
        )
        print(
            f"| {leg} (stream job, {next(m for m, g in LEG_OF_MODE.items() if g == leg)} mode) "
            f"| {spread(ingest_ms, what='i').text('{:.0f}')} | {spread(broker_ms, what='b').text('{:.0f}')} "
            f"| {cpu_ratio.text('{:.2f}')}x |"
        )
    print(f"| transcode alone | {text_of(results['transcode_cpu_ms_per_episode'])} | - | - |")
    results["targets"] = {name: d["met"] for name, d in results["targets_detail"].items()}
    for leg, why in failed.items():
        print(f"{leg}: {why}")
    if not results["targets"]:
        raise SystemExit(f"no ingest leg completed: {failed}")
    print(f"target: ingest <= {TARGET_RATIO}x the transcoding alone; targets {results['targets']}")
    (args.out / "ingest_cpu.json").write_text(json.dumps(results, indent=2))
    print(f"wrote {args.out / 'ingest_cpu.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
