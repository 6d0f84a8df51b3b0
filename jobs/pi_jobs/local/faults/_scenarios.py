"""Fault scenarios around a running `pilake stream`: SIGKILL of the job, a broker restart under
two uploaders, bad bytes, an unwritable lake; and `SCENARIOS`, every scenario by name."""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from pi_jobs.local.faults._concurrent_writers import concurrent_writers
from pi_jobs.local.faults._harness import (
    CONFIRM_TIMEOUT_S,
    STREAM_START_TIMEOUT_S,
    FaultStack,
    confirm_all,
)
from pi_jobs.local.faults._messages import (
    KCAT_GARBAGE,
    bad_messages,
    kcat_produce,
    left_incomplete,
    simulated,
)
from pi_jobs.local.faults._result import FaultResult, make_result

log = logging.getLogger("pi_jobs.local.faults")
# How long a job that keeps failing may take to exhaust its restarts (RESTART_ATTEMPTS in a row,
# each a new Python worker that replays from the checkpoint, and each failure needing the
# uploader's re-send once a checkpoint has passed the episodes): minutes on a loaded CI machine.
FAIL_AFTER_RESTARTS_TIMEOUT_S = 480.0


# -- 1. SIGKILL the stream job ----------------------------------------------------------------
def kill_stream_job(home: Path, jar_cache: Path, *, seed: int = 7100) -> FaultResult:
    """SIGKILL the whole stream job (driver, JVM, workers) after its first commits, restart it."""
    t0 = time.monotonic()
    episodes = simulated(seed, robots=2, episodes=4)
    with FaultStack(home, jar_cache=jar_cache) as stack:
        stack.start_broker()
        with stack.uploader("robot") as up:
            for ep in episodes:
                up.submit(ep)
            up.send_pending()
            # one episode a commit: the episodes wait queued, so a drained-input group commit would
            # take all eight in one commit and the kill could not land between commits
            first = stack.start_stream("--group-commit-episodes", "1")
            p = stack.wait_progress(
                first, lambda p: p.get("committed", 0) >= 2, STREAM_START_TIMEOUT_S, "2 commits"
            )
            killed, survivors = first.kill_group()
            committed_before = stack.progress().get("committed", 0)
            second = stack.start_stream()
            upload = confirm_all(up, second)
            second_progress = stack.progress()
            second.stop()
        report = stack.audit()
    return make_result(
        "kill_stream_job",
        report,
        t0,
        {
            "episodes": len(episodes),
            "committed_when_killed": committed_before,
            "committed_seen_before_kill": p.get("committed", 0),
            "processes_killed": len(killed),
            "processes_surviving_kill": len(survivors),
            "after_restart_committed": second_progress.get("committed", 0),
            "after_restart_duplicates": second_progress.get("duplicates", 0),
            "resent_episodes": upload.resent_episodes,
        },
    )


# -- 2. broker restart while uploaders run ----------------------------------------------------
def broker_restart(home: Path, jar_cache: Path, *, seed: int = 7200) -> FaultResult:
    """Two uploaders send while the broker is stopped and restarted (it forgets every record).

    The stream job keeps running; if the restart kills it, it is started again (that is what
    a supervisor does) and the restart is counted in `observed`.
    """
    t0 = time.monotonic()
    fleets = [simulated(seed, robots=1, episodes=4), simulated(seed + 1, robots=1, episodes=4)]
    # a robot id per uploader: both simulations name their robot the same otherwise
    with FaultStack(home, jar_cache=jar_cache) as stack:
        stack.start_broker()
        stream = stack.start_stream()
        stop = threading.Event()
        restarted = threading.Event()
        errors: list[BaseException] = []
        reports: list[Any] = []

        def robot(name: str, episodes: list[Any]) -> None:
            try:
                with stack.uploader(name) as up:
                    for i, ep in enumerate(episodes):
                        if i == len(episodes) // 2:
                            restarted.wait(timeout=CONFIRM_TIMEOUT_S)  # half before, half after
                        up.submit(ep)
                        up.send_pending()
                        up.poll_acks(0.2)
                    deadline = time.monotonic() + CONFIRM_TIMEOUT_S
                    while len(up.spool) and time.monotonic() < deadline and not stop.is_set():
                        up.send_pending()
                        up.poll_acks(1.0)
                    reports.append(len(up.spool))
            except BaseException as err:  # surfaced by the main thread
                errors.append(err)

        threads = [
            threading.Thread(target=robot, args=(f"robot{i}", fleet), daemon=True)
            for i, fleet in enumerate(fleets)
        ]
        for t in threads:
            t.start()
        p = stack.wait_progress(
            stream, lambda p: p.get("committed", 0) >= 1, STREAM_START_TIMEOUT_S, "a first commit"
        )
        committed_before = p.get("committed", 0)
        stack.restart_broker()
        restart_at = time.monotonic()
        restarted.set()
        job_restarts = 0
        while any(t.is_alive() for t in threads):
            if not stream.alive():
                job_restarts += 1
                log.warning("stream job exited after the broker restart; starting it again")
                stream = stack.start_stream()
            time.sleep(0.5)
        stop.set()
        if errors:
            raise errors[0]
        job_alive = stream.alive()
        stream.stop()
        report = stack.audit()
    return make_result(
        "broker_restart",
        report,
        t0,
        {
            "episodes": sum(len(f) for f in fleets),
            "uploaders": len(fleets),
            "committed_before_restart": committed_before,
            "stream_job_restarts": job_restarts,
            "flink_job_restarts_inside_the_run": stack.flink_restarts(),
            "stream_job_alive_at_end": job_alive,
            "recovered_in_s": round(time.monotonic() - restart_at, 1),
            "left_in_spools": sum(reports),
        },
    )


def bad_bytes(home: Path, jar_cache: Path, *, seed: int = 7300) -> FaultResult:
    """Bad messages between good episodes, in one job run: each quarantined with its reason,
    the job still running and committing the good episodes sent after them."""
    from confluent_kafka import Producer
    from deltalake import DeltaTable
    from pi_format import RAW_TOPIC, LakeLayout

    t0 = time.monotonic()
    good = simulated(seed, robots=1, episodes=4)
    bad, expected = bad_messages(seed + 1)
    with FaultStack(home, jar_cache=jar_cache) as stack:
        stack.start_broker()
        stream = stack.start_stream()
        with stack.uploader("robot") as up:
            for ep in good[:2]:
                up.submit(ep)
            up.send_pending()
            producer = Producer(
                {"bootstrap.servers": stack.bootstrap, "message.max.bytes": 4_000_000, "linger.ms": 5}
            )
            for key, value in bad:
                producer.produce(RAW_TOPIC, key=key.encode(), value=value)
            if producer.flush(30):
                raise RuntimeError("bad messages not delivered to the broker")
            kcat_lib = kcat_produce(stack.bootstrap, RAW_TOPIC, KCAT_GARBAGE, work=stack.home / "kcat-lib")
            for ep in good[2:]:  # good episodes after the bad ones: the job must still commit them
                up.submit(ep)
            upload = confirm_all(up, stream)
        want_records = 1 + 1 + 1 + sum(1 for k, _ in bad if expected.get(k) == "unsupported_version")
        want_records += len(KCAT_GARBAGE)
        stack.wait_progress(
            stream, lambda p: p.get("quarantined", 0) >= want_records, 120, f"{want_records} quarantine rows"
        )
        job_alive = stream.alive()
        stream.stop()
        rows = DeltaTable(LakeLayout(stack.settings.lake_root).quarantine).to_pyarrow_table().to_pylist()
        report = stack.audit()
    reasons: dict[str, list[str]] = {}
    for r in rows:
        reasons.setdefault(r["episode_id"] or "<no id>", []).append(r["reason"])
    return make_result(
        "bad_bytes",
        report,
        t0,
        {
            "good_episodes": len(good),
            "good_committed": len(upload.committed),
            "bad_episodes": len(expected),
            "garbage_records_kcat": len(KCAT_GARBAGE),
            "kcat_librdkafka": kcat_lib,
            "expected_reasons": expected,
            # their intact chunks wait in the job: `incomplete_timeout` rows may follow (SPEC 9.4)
            "left_incomplete": left_incomplete(bad),
            "quarantine_reasons": {k: sorted(set(v)) for k, v in reasons.items()},
            "quarantine_rows": len(rows),
            "stream_job_alive_after": job_alive,
        },
    )


# -- 5. the lake becomes unwritable -----------------------------------------------------------
@contextlib.contextmanager
def unwritable(path: Path) -> Iterator[bool]:
    """Make every file and directory under `path` unwritable, also for root; yields whether
    that worked (a probe write failed).

    As root, permission bits do not stop writes: the ext4/xfs immutable attribute does
    (`chattr -R +i`, needs CAP_LINUX_IMMUTABLE). Otherwise `chmod -R a-w`.
    """
    is_root = os.geteuid() == 0
    cmd_on = ["chattr", "-R", "+i", str(path)] if is_root else ["chmod", "-R", "a-w", str(path)]
    cmd_off = ["chattr", "-R", "-i", str(path)] if is_root else ["chmod", "-R", "u+w", str(path)]
    applied = subprocess.run(cmd_on, capture_output=True, check=False).returncode == 0
    probe = path / "raw" / "_delta_log" / "pilake-probe"
    try:
        probe.write_bytes(b"x")
        probe.unlink()
        works = False
    except OSError:
        works = applied
    try:
        yield works
    finally:
        subprocess.run(cmd_off, capture_output=True, check=False)


def keep_uploading_until_exit(up: Any, stream: Any, timeout_s: float) -> list[Any]:
    """Drive uploader `up` (send, re-send what got no ack, read acks) until the stream job's
    process exits or `timeout_s` passes; the acks that came meanwhile."""
    acks: list[Any] = []
    deadline = time.monotonic() + timeout_s
    while stream.proc.poll() is None and time.monotonic() < deadline and len(up.spool) > 0:
        up.send_pending(deadline=min(deadline, time.monotonic() + 5.0))
        acks += up.poll_acks(1.0)
    return acks


def lake_unwritable(home: Path, jar_cache: Path, *, seed: int = 7500) -> FaultResult:
    """Commit some episodes, make the lake immutable, upload more: the running `pilake stream`
    must exit non-zero naming the lake; once the lake is writable again a restart loses nothing."""
    t0 = time.monotonic()
    episodes = simulated(seed, robots=2, episodes=3)
    first, rest = episodes[:3], episodes[3:]
    with FaultStack(home, jar_cache=jar_cache) as stack:
        stack.start_broker()
        with stack.uploader("robot") as up:
            stream = stack.start_stream()
            for ep in first:
                up.submit(ep)
            confirm_all(up, stream)
            lake = Path(stack.settings.lake_root)
            with unwritable(lake) as works:
                if not works:
                    raise RuntimeError(f"could not make {lake} unwritable here (chattr/chmod refused)")
                for ep in rest:
                    up.submit(ep)
                up.send_pending()
                # The running job must fail by itself, after its bounded restarts. The robot keeps
                # uploading meanwhile: the episodes waiting for a group commit are in the sink's
                # memory only, so once a checkpoint has passed them a restart does not replay
                # them, and only the uploader's re-send (no ack came) brings them back to fail on.
                acked_while_unwritable = keep_uploading_until_exit(up, stream, FAIL_AFTER_RESTARTS_TIMEOUT_S)
                failed_code = stream.proc.poll()
                if failed_code is None:
                    failed_code = stream.stop()
                failed_output = stream.output()
                flink_restarts = stack.flink_restarts()  # the next run's JVM rewrites the log
                acked_while_unwritable += up.poll_acks(0.5)
            named = [line.strip() for line in failed_output.splitlines() if str(lake) in line]
            stream = stack.start_stream()
            upload = confirm_all(up, stream)
            stream.stop()
        report = stack.audit()
    return make_result(
        "lake_unwritable",
        report,
        t0,
        {
            "episodes": len(episodes),
            "committed_before_fault": len(first),
            "acked_while_unwritable": len(acked_while_unwritable),
            "failed_job_exit_code": failed_code,
            "flink_restarts_before_failing": flink_restarts,
            "failed_job_says_failed": "pilake stream: error: stream job failed" in failed_output,
            "failed_job_names_lake_path": bool(named),
            "failed_job_error": (named[-1] if named else failed_output[-300:])[:300],
            "confirmed_after_fix": len(upload.committed),
        },
    )


SCENARIOS: dict[str, Callable[..., FaultResult]] = {
    "kill_stream_job": kill_stream_job,
    "broker_restart": broker_restart,
    "bad_bytes": bad_bytes,
    "concurrent_writers": concurrent_writers,
    "lake_unwritable": lake_unwritable,
}
