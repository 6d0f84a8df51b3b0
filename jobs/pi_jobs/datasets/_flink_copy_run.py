"""Where the copy job of `pi_jobs.datasets._flink_copy` runs: the local mini-cluster in this process
(`MiniClusterJob`), or a session cluster (`submit_copy_job`: `flink run -d -py`, as `pilake stream
--cluster` does, then `SessionClusterJob` over its REST API). Both answer `status`, `failure`
and `cancel` for the driver's wait loop.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from pi_jobs.datasets._flink_copy_job import ShareSettings
from pi_jobs.datasets._transfer import CopyError

_LAUNCHER = (
    '"""Written by pi_jobs.datasets._flink_copy_run: `flink run -py` runs this with a config file."""\n'
    "import sys\n\n"
    "from pi_jobs.datasets._flink_copy_job import run_submitted\n\n"
    "run_submitted(sys.argv[1])\n"
)


class MiniClusterJob:
    """The job on the local mini-cluster (this process's PyFlink JVM)."""

    where = "mini-cluster"

    def __init__(self, settings: ShareSettings, items: list[str]) -> None:
        from pi_jobs.datasets._flink_copy_job import build_copy_job, job_name

        self.client = build_copy_job(settings, items).execute_async(job_name(settings))
        self.job_id = str(self.client.get_job_id())
        self.log_dir = Path(settings.log_dir)

    def status(self) -> str:
        try:
            return str(self.client.get_job_status().result()).rsplit(".", 1)[-1].upper()
        except Exception:  # the mini-cluster of a bounded job shuts down when it ends
            try:
                self.client.get_job_execution_result().result()
            except Exception:
                return "FAILED"
            return "FINISHED"

    def failure(self) -> str:
        from pi_jobs.stream._logs import log_tail, python_error

        try:
            self.client.get_job_execution_result().result()
        except Exception as err:
            return python_error(str(err)) or str(err)[-4000:]
        return log_tail(self.log_dir)

    def cancel(self) -> None:
        import contextlib

        with contextlib.suppress(Exception):
            self.client.cancel().result()


class SessionClusterJob:
    """The job on a session cluster, through its REST API (`pi_jobs.local.flink_submit.ClusterJob`)."""

    def __init__(self, url: str, job_id: str, log_dir: Path) -> None:
        from pi_jobs.local.flink_submit import ClusterJob

        self.job = ClusterJob(url, job_id, log_dir)
        self.job_id = job_id
        self.where = f"session cluster {self.job.url}"

    def status(self) -> str:
        return self.job.status()

    def failure(self) -> str:
        return self.job.failure()

    def cancel(self) -> None:
        self.job.cancel()


def submit_copy_job(
    settings: ShareSettings, items: list[str], cluster: str, work_dir: Path
) -> SessionClusterJob:
    """`flink run -d -py` the job onto the session cluster (as `pilake stream --cluster` does)."""
    from pi_jobs.local.flink_submit import cluster_status, flink_home, rest_host_port
    from pi_jobs.stream._logs import python_error

    status = cluster_status(cluster)
    if not status.running:
        raise CopyError(f"{status.detail}; start one with `pilake up --flink` or check --cluster")
    if status.slots_available < settings.parallelism:
        raise CopyError(
            f"the cluster at {status.url} has {status.slots_available} free task slots of "
            f"{status.slots_total} and the copy needs {settings.parallelism} (--parallelism): start "
            "more TaskManagers, wait for other jobs or lower the parallelism"
        )
    submit_dir = work_dir / "submit"
    submit_dir.mkdir(parents=True, exist_ok=True)
    launcher = submit_dir / "launch_copy_job.py"
    launcher.write_text(_LAUNCHER)
    config_path = submit_dir / f"copy-{settings.run_id}.json"
    config_path.write_text(json.dumps({"settings": settings.to_json(), "shares": items}))
    host, port = rest_host_port(cluster)
    Path(settings.log_dir).mkdir(parents=True, exist_ok=True)
    cmd = [
        str(flink_home() / "bin" / "flink"), "run", "-m", f"{host}:{port}", "-d",
        "-p", str(settings.parallelism),
        "-py", str(launcher), "-pyexec", sys.executable, "-pyclientexec", sys.executable,
        str(config_path),
    ]  # fmt: skip
    env = {**os.environ, "FLINK_LOG_DIR": settings.log_dir, "OPENBLAS_NUM_THREADS": "1"}
    try:
        proc = subprocess.run(
            cmd, env=env, capture_output=True, text=True, timeout=300, check=False, stdin=subprocess.DEVNULL
        )
    finally:
        config_path.unlink(missing_ok=True)
    out = proc.stdout + proc.stderr
    found = re.search(r"pilake-copy job id: ([0-9a-f]{32})|JobID ([0-9a-f]{32})", out)
    if proc.returncode != 0 or found is None:
        reason = python_error(out) or out.strip()[-3000:]
        raise CopyError(
            f"`flink run` could not submit the copy job to {status.url} (exit {proc.returncode}):\n"
            f"{reason}\nclient logs in {settings.log_dir}"
        )
    return SessionClusterJob(cluster, found.group(1) or found.group(2), Path(settings.log_dir))
