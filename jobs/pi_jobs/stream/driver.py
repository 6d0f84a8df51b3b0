"""The stream job's driver: starts the job (`pi_jobs.stream.job`) on the local mini-cluster (or
watches one submitted to a session cluster, through a `JobHandle`), watches the progress file
the sink writes, and stops it when asked or, with `until_idle`, once every record of the raw
topic has been processed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from pi_jobs.errors import StreamJobError
from pi_jobs.stream._logs import log_tail, python_error
from pi_jobs.stream._progress import progress_files, read_progress
from pi_jobs.stream.config import StreamJobConfig, StreamReport
from pi_jobs.stream.job import build_job, effective_log_dir
from pi_jobs.stream.offsets import committed_offsets, true_end_offsets

log = logging.getLogger("pi_jobs")

# How often the driver asks the job's status and reads the progress files: while it starts (to
# report its startup time closely), and once it runs (a failure is reported within a second).
STARTUP_POLL_S = 0.25
STATUS_POLL_S = 1.0


def _report(progress: Mapping[str, Any], elapsed_s: float, startup_s: float) -> StreamReport:
    return StreamReport(
        messages=int(progress.get("messages", 0)),
        episodes_committed=int(progress.get("committed", 0)),
        episodes_duplicate=int(progress.get("duplicates", 0)),
        quarantined=int(progress.get("quarantined", 0)),
        incomplete=int(progress.get("incomplete", 0)),
        bytes_in=int(progress.get("bytes", 0)),
        elapsed_s=elapsed_s,
        startup_s=startup_s,
        busy_s=max(0, int(progress.get("last_activity_ns", 0)) - int(progress.get("first_activity_ns", 0)))
        / 1e9,
    )


def _failure_cause(client: Any) -> str:
    """The job's exception, Python worker traceback included, from the job result."""
    try:
        client.get_job_execution_result().result()
    except Exception as err:
        # The Java chain is long; the Python traceback's end holds the reason.
        return python_error(str(err)) or str(err)[-4000:]
    return "(the job result holds no exception)"


def _job_status(client: Any) -> str:
    return str(client.get_job_status().result()).rsplit(".", 1)[-1].upper()


def _cancel(client: Any) -> None:
    try:
        client.cancel().result()
    except Exception as err:  # already finished or failed: nothing left to cancel
        log.debug("cancel: %s", err)


class JobHandle(Protocol):
    """A submitted stream job as the driver watches it: on the embedded mini-cluster (PyFlink's
    JobClient) or on a session cluster (its REST API, `pi_jobs.local.flink_submit`).

    `log_dir` is where the job's Flink logs are, for error messages.
    """

    job_id: str
    log_dir: Path

    def status(self) -> str:
        """Flink's JobStatus name (RUNNING, RESTARTING, FAILED, ...); raises if unavailable."""
        ...

    def failure(self) -> str:
        """Why the job failed, the end of the Python traceback when there is one."""
        ...

    def cancel(self) -> None:
        """Cancel the job; nothing happens if it has already ended."""
        ...


class _EmbeddedJob:
    """The job on this process's local mini-cluster."""

    def __init__(self, config: StreamJobConfig) -> None:
        self._client = build_job(config).execute_async("pilake-stream")
        self.job_id = str(self._client.get_job_id())
        self.log_dir = effective_log_dir(config)

    def status(self) -> str:
        return _job_status(self._client)

    def failure(self) -> str:
        return _failure_cause(self._client)

    def cancel(self) -> None:
        _cancel(self._client)


def run_stream_job(
    config: StreamJobConfig,
    *,
    until_idle: bool,
    idle_timeout_s: float = 5.0,
    max_runtime_s: float | None = None,
    submit: Callable[[StreamJobConfig], JobHandle] | None = None,
) -> StreamReport:
    """Run the stream job on the local Flink mini-cluster (or where `submit` puts it).

    Args:
        config: topics, lake, catalog, working dir.
        until_idle: stop once every record of the raw topic (up to its true end) is processed
            and nothing new arrived for `idle_timeout_s` while the job was RUNNING.
        idle_timeout_s: quiet time that counts as idle.
        max_runtime_s: stop after this long in any case (None: until idle or Ctrl-C).
        submit: starts the job and returns its handle (None: the embedded mini-cluster). The
            sink's progress files must be readable here (a local cluster or a shared disk).

    Returns:
        Counts and timing of this run.

    Raises:
        StreamJobError: the job failed (after its bounded restarts); the message names the log
            directory and quotes the worker's error.

    Example:
        >>> report = run_stream_job(config, until_idle=True)
        >>> report.episodes_committed
        6
    """
    if idle_timeout_s <= 0:
        raise ValueError(f"idle_timeout_s must be > 0, got {idle_timeout_s}")
    if max_runtime_s is not None and max_runtime_s <= 0:
        raise ValueError(f"max_runtime_s must be > 0 or None, got {max_runtime_s}")
    t0 = time.monotonic()
    config.work_dir.mkdir(parents=True, exist_ok=True)
    progress_path = config.progress_path
    for old in progress_files(progress_path):  # counts are per run
        old.unlink(missing_ok=True)

    start_offsets: dict[int, int] = {}
    ends: dict[int, int] = {}
    if until_idle:
        ends = true_end_offsets(config)
        start_offsets = committed_offsets(config, sorted(ends))
    job = submit(config) if submit is not None else _EmbeddedJob(config)
    startup_s = 0.0
    log.info("stream job %s submitted; logs in %s", job.job_id, job.log_dir)

    last_messages = -1
    last_change = time.monotonic()
    last_log = time.monotonic()
    last_log_bytes = 0
    progress: dict[str, Any] = {}
    ends_checked_at = time.monotonic()
    try:
        while True:
            # 4 looks a second until the job runs, then 1: each status call is a Py4J call and an
            # RPC inside the JVM, whose idle CPU (~45 ms a second, Py4J's and pekko's threads
            # among the largest) counts against every episode (benchmarks/ingest/PROFILE.md)
            time.sleep(STATUS_POLL_S if startup_s else STARTUP_POLL_S)
            try:
                status = job.status()
            except Exception as err:
                # Once a job has failed for good, the local mini-cluster may already have
                # dropped it: the status call itself then throws. Report it as the failure it is.
                log.debug("job status unavailable, treating the job as failed: %s", str(err)[:500])
                status = "FAILED"
            if status in ("FAILED", "FAILING"):
                log_dir = job.log_dir
                cause = job.failure()
                # the job result usually carries the worker's traceback; else quote the logs
                detail = cause if "Traceback" in cause else f"{cause}\n{log_tail(log_dir)}"
                raise StreamJobError(f"stream job failed; logs in {log_dir}\n{detail}")
            if status in ("CANCELED", "FINISHED"):
                raise StreamJobError(f"stream job stopped by itself ({status}); logs in {job.log_dir}")
            if status == "RUNNING" and not startup_s:
                startup_s = time.monotonic() - t0
                log.info("stream job running after %.1f s", startup_s)
            progress = read_progress(progress_path) or progress
            now = time.monotonic()
            messages = int(progress.get("messages", 0))
            if messages != last_messages:
                last_messages, last_change = messages, now
            if now - last_log >= 5.0:
                bytes_in = int(progress.get("bytes", 0))
                log.info(
                    "stream: %d messages, %d episodes committed, %d duplicate, %d quarantined, "
                    "%d incomplete, %.1f MB/s",
                    messages,
                    int(progress.get("committed", 0)),
                    int(progress.get("duplicates", 0)),
                    int(progress.get("quarantined", 0)),
                    int(progress.get("incomplete", 0)),
                    (bytes_in - last_log_bytes) / 1e6 / (now - last_log),
                )
                last_log, last_log_bytes = now, bytes_in
            if max_runtime_s is not None and now - t0 >= max_runtime_s:
                log.info("stream: max_runtime_s=%s reached, stopping", max_runtime_s)
                break
            # a job that is restarting (a TaskManager lost) is not idle
            if until_idle and status == "RUNNING" and now - last_change >= idle_timeout_s:
                incomplete = int(progress.get("incomplete", 0))
                # Incomplete episodes live in the sink's memory only: stopping now would lose
                # their chunks (offsets move on). Wait for their timeout to quarantine them
                # (and keep their raw bytes); bounded in case no timer fires.
                if incomplete and now - last_change < config.incomplete_timeout_s + idle_timeout_s + 10:
                    continue
                # Episodes waiting for their group commit: its delay timer commits them.
                if int(progress.get("buffered", 0)) and now - last_change < idle_timeout_s + 30:
                    continue
                if not _caught_up(progress, ends, start_offsets):
                    if now - ends_checked_at > 10 * idle_timeout_s and status == "RUNNING":
                        log.info(
                            "stream: waiting for offsets %s, processed %s", ends, progress.get("offsets")
                        )
                        ends_checked_at = now
                    continue
                # Caught up with the ends we knew; new records may have arrived since.
                ends = true_end_offsets(config)
                ends_checked_at = time.monotonic()
                progress = read_progress(progress_path) or progress
                if _caught_up(progress, ends, start_offsets):
                    _wait_for_commit(config, ends)
                    break
    except KeyboardInterrupt:
        log.info("stream: interrupted, cancelling the job")
    finally:
        job.cancel()
    progress = read_progress(progress_path) or progress
    report = _report(progress, time.monotonic() - t0, startup_s)
    log.info(
        "stream: done, %d messages, %d committed, %.1f MB/s over %.1f s (startup %.1f s); "
        "%.1f MB/s while busy",
        report.messages,
        report.episodes_committed,
        report.mb_per_s,
        report.elapsed_s,
        report.startup_s,
        report.busy_mb_per_s,
    )
    return report


def _wait_for_commit(config: StreamJobConfig, ends: Mapping[int, int]) -> None:
    """Wait until the job's group has committed the true end offsets (Flink commits them when
    a checkpoint completes), so the next run starts after them.

    A fixed wait of one checkpoint interval was not enough here: Flink's first offset commit to
    a new group took several seconds. On timeout the next run re-reads some records, which is
    harmless (decision 3), so this only logs.
    """
    timeout_s = max(15.0, 5 * config.checkpoint_interval_ms / 1000)
    deadline = time.monotonic() + timeout_s
    wanted = {p: end for p, end in ends.items() if end > 0}
    while True:
        committed = committed_offsets(config, sorted(wanted))
        if all(committed.get(p, -1) >= end for p, end in wanted.items()):
            return
        if time.monotonic() >= deadline:
            log.warning(
                "stream: offsets not committed within %.0f s (committed %s, ends %s); the next run "
                "re-reads the rest, which is harmless",
                timeout_s,
                committed,
                wanted,
            )
            return
        time.sleep(0.5)


def _caught_up(progress: Mapping[str, Any], ends: Mapping[int, int], start: Mapping[int, int]) -> bool:
    done: Mapping[str, int] = progress.get("offsets", {})
    for p, end in ends.items():
        processed = max(int(done.get(str(p), -1)) + 1, start.get(p, -1))
        if end > 0 and processed < end:
            return False
    return True
