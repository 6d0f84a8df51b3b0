"""`pilake stream`: the PyFlink stream job, from the command line: on the embedded mini-cluster,
or submitted to a Flink session cluster (`--cluster URL` or PILAKE_FLINK_URL)."""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

from pi_jobs.settings import Settings
from pi_jobs.stream.config import StreamJobConfig, stream_config

if TYPE_CHECKING:
    from pi_jobs.stream.driver import JobHandle


def stream_config_from_args(settings: Settings, args: argparse.Namespace) -> StreamJobConfig:
    """`stream_config` with the overrides given to `pilake stream`.

    Raises:
        ValueError: a keyframe interval that does not divide the video rows' frame count.
    """
    from dataclasses import replace

    config = stream_config(settings)
    if args.incomplete_timeout_s is not None:
        config = replace(config, incomplete_timeout_s=args.incomplete_timeout_s)
    if args.parallelism is not None:
        config = replace(config, parallelism=args.parallelism)
    if args.group_commit_episodes is not None:
        config = replace(config, group_commit_max_episodes=args.group_commit_episodes)
    if args.group_commit_delay_ms is not None:
        config = replace(config, group_commit_delay_ms=args.group_commit_delay_ms)
    if getattr(args, "group_commit_max_wait_ms", None) is not None:
        config = replace(config, group_commit_max_wait_ms=args.group_commit_max_wait_ms)
    if getattr(args, "python_execution_mode", None) is not None:
        config = replace(config, python_execution_mode=args.python_execution_mode)
    limits = {
        name: value
        for name, value in (
            ("max_episode_bytes", _mb(args.max_episode_mb)),
            ("max_held_bytes", _mb(args.max_held_mb)),
            ("max_chunks_per_episode", args.max_chunks_per_episode),
            ("max_held_episodes", args.max_held_episodes),
        )
        if value is not None
    }
    if limits:
        config = replace(config, limits=replace(config.limits, **limits))
    if args.keyframe_interval is not None:
        config = replace(
            config, featurize=replace(config.featurize, keyframe_interval=args.keyframe_interval)
        )
    return config


def _mb(value: float | None) -> int | None:
    return None if value is None else round(value * 1_000_000)


def _cmd_stream(settings: Settings, args: argparse.Namespace) -> int:
    from pi_jobs.local.stack import ensure_topics
    from pi_jobs.stream.driver import run_stream_job

    ensure_topics(settings.bootstrap_servers, settings.kafka.options, settings.ack_routes)
    config = stream_config_from_args(settings, args)
    cluster = args.cluster or settings.flink_rest_url
    submit: Callable[[StreamJobConfig], JobHandle] | None = None
    if cluster:
        from dataclasses import replace

        from pi_jobs.local.flink_submit import submit_stream_job

        # a job on a cluster runs unattended: it outlives any dependency's restart (never gives up)
        config = replace(config, restart_attempts=None)

        if not (args.until_idle or args.max_runtime_s):
            # detached: the job runs on in the cluster after this command returns
            job = submit_stream_job(config, cluster)
            print(f"stream: job {job.job_id} running on {job.url} (parallelism {config.parallelism})")
            print(
                f"stream: watch it at {job.url}/#/job/running/{job.job_id}; cancel with "
                f"`curl -X PATCH '{job.url}/jobs/{job.job_id}?mode=cancel'`"
            )
            return 0
        submit = functools.partial(submit_stream_job, url=cluster)

    report = run_stream_job(
        config,
        until_idle=args.until_idle,
        idle_timeout_s=args.idle_timeout_s,
        max_runtime_s=args.max_runtime_s,
        submit=submit,
    )
    print(f"stream: {report}")
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register this group's commands on the `pilake` parser."""
    p = sub.add_parser("stream", help="run the PyFlink stream job")
    p.add_argument("--until-idle", action="store_true", help="stop once the topic is drained")
    p.add_argument(
        "--cluster",
        metavar="URL",
        default=None,
        help="submit to the Flink session cluster with this REST address (default PILAKE_FLINK_URL; "
        "none: the embedded mini-cluster); detached unless --until-idle or --max-runtime-s",
    )
    p.add_argument("--idle-timeout-s", type=float, default=5.0)
    p.add_argument("--max-runtime-s", type=float, default=None)
    p.add_argument(
        "--incomplete-timeout-s",
        type=float,
        default=None,
        help="quarantine an episode with no new chunk for this long (default 60)",
    )
    p.add_argument(
        "--parallelism",
        type=int,
        default=None,
        help="parallel sink subtasks, each its own lake writer (default 1; 2+ on a host with spare cores)",
    )
    p.add_argument(
        "--group-commit-episodes",
        type=int,
        default=None,
        help="most episodes per group commit (default 32)",
    )
    p.add_argument(
        "--group-commit-delay-ms",
        type=int,
        default=None,
        help="the group commits once no message came for this long: the input is drained (default 200)",
    )
    p.add_argument(
        "--group-commit-max-wait-ms",
        type=int,
        default=None,
        help="longest an episode waits for its group commit while messages keep coming (default 2000)",
    )
    p.add_argument(
        "--python-execution-mode",
        choices=("process", "thread"),
        default=None,
        help="where the sink's Python runs: a PyFlink worker process (default) or, "
        "experimental (a benchmark run hung in it once), threads inside the Flink JVM (PEMJA)",
    )
    p.add_argument(
        "--keyframe-interval",
        type=int,
        default=None,
        help="frames between IDRs in the lake's training video, a divisor of its 10-frame rows "
        "(default 1, intra-only: fastest shuffled reads; 10, one GOP per row: 2-3x fewer video bytes)",
    )
    limits = p.add_argument_group(
        "limits",
        "what one sink subtask may hold in memory (format/SPEC.md 9.5); over a limit an "
        "episode is quarantined as limit_exceeded",
    )
    limits.add_argument(
        "--max-episode-mb", type=float, default=None, help="bytes per episode (default 1073.7)"
    )
    limits.add_argument("--max-held-mb", type=float, default=None, help="bytes per subtask (default 4295)")
    limits.add_argument(
        "--max-chunks-per-episode", type=int, default=None, help="largest chunk_count accepted (default 4096)"
    )
    limits.add_argument(
        "--max-held-episodes", type=int, default=None, help="episodes assembling per subtask (default 1000)"
    )
    p.set_defaults(func=_cmd_stream)
