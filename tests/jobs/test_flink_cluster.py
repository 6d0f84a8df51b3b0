"""The stream job on a real Flink standalone session cluster (JobManager and TaskManager JVMs from
the apache-flink wheel, started by `pilake up --flink`), at parallelism 2 on two task slots.

Half the episodes are uploaded and the job (`pilake stream --until-idle` with PILAKE_FLINK_URL:
submitted with `flink run`, watched over REST) commits some of them; then the TaskManager JVM is
SIGKILLed, the other half is uploaded, and a new TaskManager is started (`taskmanager.sh start`).
The job must restore its last checkpoint, the uploader must get every confirmation (it never
re-sends here, so only Flink's recovery can deliver), the driver must see the topic drained and
stop the job, and `pilake audit` must show nothing missing and nothing duplicated.
`pilake down` must leave no process of the cluster behind. Config helpers are unit-tested first.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.conftest import _free_port

T = TypeVar("T")
_SUBMITTED = re.compile(r"stream job ([0-9a-f]{32}) submitted")
# Generous bounds for a loaded 2-core machine; each step normally takes a fraction of this.
START_TIMEOUT_S = 240.0
RESTORE_TIMEOUT_S = 240.0
CONFIRM_TIMEOUT_S = 300.0
# The uploader never re-sends in the TaskManager test (its re-send wait is far past the whole
# test): every episode must reach the lake through Flink's restore from the checkpoint and the
# replay of the topic from its offsets, not through a second copy from the robot.
NO_RESEND_S = 24 * 3600.0


def _pilake(env: dict[str, str], *args: str, timeout_s: float = 300.0) -> subprocess.CompletedProcess[str]:
    exe = str(Path(sys.executable).with_name("pilake"))
    return subprocess.run(
        [exe, *args], env=env, capture_output=True, text=True, timeout=timeout_s, check=False
    )


def _python_processes(pids: list[int]) -> list[int]:
    """The Python processes among `pids` (the cluster's workers and their launchers)."""
    found = []
    for pid in pids:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"java" not in cmdline.split(b"\0")[0]:
            found.append(pid)
    return found


def _poll(what: str, timeout_s: float, probe: Callable[[], T | None], why: Callable[[], str]) -> T:
    """`probe()` until it returns something; TimeoutError with `why()` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = probe()
        if got is not None:
            return got
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {what} within {timeout_s:.0f} s: {why()}")
        time.sleep(0.5)


def test_cluster_config_is_written_from_the_settings(tmp_path: Path) -> None:
    from pi_jobs.local.flink_cluster import LocalClusterConfig, write_cluster_config
    from pi_jobs.settings import Settings

    settings = Settings(home=tmp_path, flink_rest_url="http://127.0.0.1:18123")
    conf = write_cluster_config(settings, LocalClusterConfig(slots=3, taskmanager_memory_mb=2048))
    text = (conf / "config.yaml").read_text()
    for line in (
        'rest.port: "18123"',
        'taskmanager.numberOfTaskSlots: "3"',
        'taskmanager.memory.process.size: "2048m"',
        f'python.executable: "{sys.executable}"',
        f'env.pid.dir: "{tmp_path / "flink" / "run"}"',
        f'env.log.dir: "{tmp_path / "flink" / "log"}"',
        f'io.tmp.dirs: "{tmp_path / "flink" / "tmp"}"',  # not /tmp: removed when the cluster stops
    ):
        assert line in text.splitlines(), (line, text)
    assert (conf / "masters").read_text() == "127.0.0.1:18123\n"
    assert (conf / "log4j.properties").is_file()


def test_extra_flink_configuration_is_written_and_cannot_replace_the_clusters_own(tmp_path: Path) -> None:
    from pi_jobs.local.flink_cluster import LocalClusterConfig, write_cluster_config
    from pi_jobs.settings import Settings

    settings = Settings(home=tmp_path, flink_rest_url="http://127.0.0.1:18124")
    extra = (("metrics.reporter.prom.port", "9300-9301"),)
    conf = write_cluster_config(settings, LocalClusterConfig(slots=1, extra=extra))
    assert 'metrics.reporter.prom.port: "9300-9301"' in (conf / "config.yaml").read_text().splitlines()
    with pytest.raises(ValueError, match=r"may not set rest\.port"):
        write_cluster_config(settings, LocalClusterConfig(extra=(("rest.port", "1"),)))


def test_bad_cluster_settings_are_refused() -> None:
    from pi_jobs.local.flink_cluster import LocalClusterConfig
    from pi_jobs.local.flink_submit import rest_host_port

    with pytest.raises(ValueError, match="slots must be in"):
        LocalClusterConfig(slots=0)
    with pytest.raises(ValueError, match="jobmanager_memory_mb must be >= 768"):
        LocalClusterConfig(jobmanager_memory_mb=512)
    with pytest.raises(ValueError, match="must look like http://host:port"):
        rest_host_port("https://flink.example.com")
    assert rest_host_port("127.0.0.1:9081") == ("127.0.0.1", 9081)


def test_job_config_survives_the_trip_to_flink_run(tmp_path: Path) -> None:
    from pi_jobs.errors import StreamJobError
    from pi_jobs.stream.config import StreamJobConfig
    from pi_jobs.stream.featurize import FeaturizeConfig
    from pi_jobs.stream.job import config_from_json, config_to_json

    config = StreamJobConfig(
        "127.0.0.1:1",
        str(tmp_path / "lake"),
        str(tmp_path / "catalog"),
        tmp_path / "flink",
        tmp_path / "jars",
        parallelism=2,
        checkpoint_interval_ms=1500,
        featurize=FeaturizeConfig(video_width=32, video_height=32, keyframe_interval=5),
        client_options={"security.protocol": "SASL_SSL"},
    )
    assert config_from_json(config_to_json(config)) == config
    with pytest.raises(StreamJobError, match="not a stream job config"):
        config_from_json('{"lake_root": "x"}')


def test_submitting_to_no_cluster_says_so(tmp_path: Path) -> None:
    from pi_jobs.errors import StackError
    from pi_jobs.local.flink_submit import submit_stream_job
    from pi_jobs.stream.config import StreamJobConfig

    config = StreamJobConfig("127.0.0.1:1", str(tmp_path / "lake"), "", tmp_path, tmp_path)
    with pytest.raises(StackError, match=r"no Flink REST API at http://127\.0\.0\.1:"):
        submit_stream_job(config, f"http://127.0.0.1:{_free_port()}")


@pytest.mark.integration
def test_taskmanager_killed_half_way(tmp_path: Path, stack_settings: Any) -> None:
    from pi_jobs.errors import StreamJobError
    from pi_jobs.local.faults import FaultStack
    from pi_jobs.local.faults._messages import simulated
    from pi_jobs.local.flink_cluster import (
        cluster_log_dir,
        cluster_processes,
        start_taskmanager,
        stop_local_cluster,
        taskmanager_pids,
    )
    from pi_jobs.local.flink_submit import ClusterJob, submit_stream_job
    from pi_jobs.stream._logs import log_tail
    from pi_jobs.stream.config import stream_config

    t0 = time.monotonic()
    phases: dict[str, float] = {}  # seconds from the start to the end of each step, for the report

    def mark(name: str) -> None:
        phases[name] = round(time.monotonic() - t0, 1)

    episodes = simulated(7400, robots=2, episodes=4)
    first, second = episodes[: len(episodes) // 2], episodes[len(episodes) // 2 :]
    url = f"http://127.0.0.1:{_free_port()}"
    with FaultStack(tmp_path / "home", jar_cache=Path(stack_settings.jar_dir)) as stack:
        settings = replace(stack.settings, flink_rest_url=url)
        env = {**stack.env(), "PILAKE_FLINK_URL": url}

        def logs() -> str:  # the cluster's logs, quoted when a step fails
            return log_tail(cluster_log_dir(settings))

        try:
            up_cli = _pilake(env, "up", "--flink")
            mark("up")
            assert up_cli.returncode == 0, up_cli.stdout + up_cli.stderr
            status_cli = _pilake(env, "status")
            assert "1 TaskManager(s), 2/2 slots free" in status_cli.stdout, status_cli.stdout
            # a job that cannot start fails in the `flink run` client, with the reason quoted
            bad = replace(stream_config(settings), lake_root="/proc/pilake-no-lake")
            with pytest.raises(StreamJobError, match="cannot create or open the lake's tables"):
                submit_stream_job(bad, url)
            mark("refused")

            with stack.uploader("robot", resend_after_s=NO_RESEND_S) as up:
                for ep in first:
                    up.submit(ep)
                up.send_pending()
                # the driver submits the job to the cluster and watches it until the topic is drained
                stream = stack.start_stream(
                    "--parallelism", "2", "--until-idle", "--idle-timeout-s", "10", "--max-runtime-s", "500",
                    extra_env={"PILAKE_FLINK_URL": url},
                )  # fmt: skip
                job_id = _poll(
                    "submitted job",
                    START_TIMEOUT_S,
                    lambda: m.group(1) if (m := _SUBMITTED.search(stream.output())) else None,
                    lambda: f"{stream.output()[-3000:]}\n{logs()}",
                )
                job = ClusterJob(url, job_id, cluster_log_dir(settings))
                mark("submitted")
                twice = _pilake(env, "stream", "--parallelism", "2")
                assert twice.returncode == 1 and f"job {job_id} (pilake-stream[" in twice.stderr, twice.stderr

                # Killed once the first half is committed and a checkpoint has completed after
                # it. What the sink holds in memory across a checkpoint is read back from Kafka
                # after a restore (pi_jobs.stream._held; the crash point held_across_checkpoints
                # proves it deterministically), but a kill at any moment, with re-sends off,
                # still lost 1 of 8 episodes in one CI run (2026-11-26, subtask 0 holding one
                # buffered episode; cause not found): that case is open. What this test proves:
                # Flink's restore alone delivers everything sent around the kill, exactly once.
                def settled() -> int | None:
                    p = stack.progress()
                    if (
                        p.get("committed", 0) >= len(first)
                        and not p.get("buffered")
                        and not p.get("incomplete")
                    ):
                        return job.checkpoints().completed
                    return None

                settled_at = _poll(
                    "the first half committed",
                    START_TIMEOUT_S,
                    settled,
                    lambda: f"job {job.status()}, progress {stack.progress()}\n{logs()}",
                )
                _poll(
                    "a checkpoint after the commits",
                    START_TIMEOUT_S,
                    lambda: True if job.checkpoints().completed > settled_at else None,
                    lambda: f"job {job.status()}, {job.checkpoints()}\n{logs()}",
                )
                held_when_killed = {k: stack.progress().get(k, 0) for k in ("incomplete", "buffered")}
                killed = taskmanager_pids(settings)
                assert len(killed) == 1, killed
                os.kill(killed[0], signal.SIGKILL)
                committed_when_killed = stack.progress().get("committed", 0)
                _poll("TaskManager exit", 60, lambda: True if not taskmanager_pids(settings) else None, str)
                # the Python workers of the killed TaskManager outlive it (reparented, idle)
                orphans = _python_processes(cluster_processes(settings))
                mark("killed")

                for ep in second:
                    up.submit(ep)
                up.send_pending()
                start_taskmanager(settings)
                mark("new_taskmanager")
                restored = _poll(
                    "restore from a checkpoint",
                    RESTORE_TIMEOUT_S,
                    lambda: job.checkpoints().restored_id if job.status() == "RUNNING" else None,
                    lambda: f"job {job.status()}, {job.checkpoints()}\n{logs()}",
                )
                mark("restored")
                report = up.run_until_confirmed(timeout_s=CONFIRM_TIMEOUT_S)
                mark("confirmed")
                assert not report.pending, f"never confirmed: {report.pending}; job {job.status()}\n{logs()}"
            progress = stack.progress()
            # drained: the driver cancels the job and exits by itself
            exit_code = stream.proc.wait(timeout=300)
            output = stream.output()
            assert exit_code == 0 and "stream: StreamReport(" in output, output[-3000:] + logs()
            assert "max_runtime_s" not in output, output[-3000:]
            assert job.status() == "CANCELED"
            mark("drained")
            audit = stack.audit()
            mark("audit")
        finally:
            down = _pilake(env, "down")
            left = cluster_processes(settings)
            stop_local_cluster(settings)  # whatever `pilake down` missed, so the test never leaks
    observed = {
        "committed_when_killed": committed_when_killed,
        "held_when_killed": held_when_killed,
        "recovered": progress.get("recovered"),
        "orphaned_python_workers": len(orphans),
        "restored_checkpoint": restored,
        "sink_subtasks": progress.get("subtasks"),
        "committed": progress.get("committed"),
        "duplicates": progress.get("duplicates"),
        "resent_episodes": report.resent_episodes,
        "phases_s": phases,
    }
    print(observed, {k: audit[k] for k in ("episodes_in", "visible", "missing", "duplicated")})
    assert down.returncode == 0 and left == [], (down.stdout + down.stderr, left)
    assert 2 <= committed_when_killed <= len(first), "kill after commits, before the 2nd half"
    assert restored >= 1
    # only Flink's recovery delivered: the uploader sent each episode once
    assert report.resent_episodes == 0, observed
    assert progress.get("subtasks") == 2, "parallelism 2: two sink subtasks, two progress files"
    assert (audit["missing"], audit["duplicated"]) == (0, 0), audit
    assert audit["ok"] and audit["visible"] == audit["episodes_in"] == len(episodes), audit
    assert audit["quarantined"] == 0, audit
