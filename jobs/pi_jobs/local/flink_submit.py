"""The stream job on any Flink session cluster: its REST API (`cluster_status`, `ClusterJob`) and
`submit_stream_job`, which runs `flink run -d -py` (`pilake stream --cluster URL`).

The submitted job is the same graph the embedded driver runs (`pi_jobs.stream.job.build_job`):
a small launcher script reads the job's config file and calls `pi_jobs.stream.job.run_submitted`
inside the `flink run` client. `ClusterJob` is the job's handle over the REST API (a
`pi_jobs.stream.driver.JobHandle`), which `run_stream_job` watches for `--until-idle`. The local
cluster that `pilake up --flink` starts is `pi_jobs.local.flink_cluster`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pi_jobs.errors import StackError, StreamJobError
from pi_jobs.stream.config import StreamJobConfig

# What `flink run -py` executes: the same job graph as the embedded driver, from a config file.
_LAUNCHER = (
    '"""Written by pi_jobs.local.flink_submit: `flink run -py` runs this with a config file."""\n'
    "import sys\n\n"
    "from pi_jobs.stream.job import run_submitted\n\n"
    "run_submitted(sys.argv[1])\n"
)
log = logging.getLogger("pi_jobs")
_ENDED = ("CANCELED", "FAILED", "FINISHED")
_JOB_ID = re.compile(r"pilake-stream job id: ([0-9a-f]{32})|JobID ([0-9a-f]{32})")


@dataclass(frozen=True, slots=True)
class ClusterStatus:
    """What a session cluster's REST API says (`running` False: it did not answer)."""

    running: bool
    url: str
    detail: str
    taskmanagers: int = 0
    slots_total: int = 0
    slots_available: int = 0
    jobs_running: int = 0


@dataclass(frozen=True, slots=True)
class CheckpointCounts:
    """A job's checkpoints: completed so far, and the one the job last restored from (None: never)."""

    completed: int
    restored_id: int | None


def flink_home() -> Path:
    """The Flink distribution inside the installed `apache-flink` wheel (bin/, lib/, conf/)."""
    try:
        import pyflink
    except ImportError as err:
        raise StackError(
            "the Flink session cluster comes from the apache-flink wheel: pip install apache-flink"
        ) from err
    home = Path(pyflink.__file__).parent
    if not (home / "bin" / "start-cluster.sh").is_file():
        raise StackError(f"apache-flink is installed but has no bin/start-cluster.sh under {home}")
    return home


def rest_host_port(url: str) -> tuple[str, int]:
    """(host, port) of a Flink REST address; port 8081 when it names none.

    Raises:
        ValueError: not an http:// address.

    Example:
        >>> rest_host_port("http://127.0.0.1:18081")
        ('127.0.0.1', 18081)
    """
    parts = urlsplit(url if "://" in url else f"http://{url}")
    if parts.scheme != "http" or not parts.hostname:
        raise ValueError(
            f"a Flink REST address must look like http://host:port, got {url!r} (TLS REST endpoints "
            "are not supported by pilake: submit with Flink's own `flink run` there)"
        )
    return parts.hostname, parts.port or 8081


def rest_base(url: str) -> str:
    """The address in the one form the REST calls use: `http://host:port`, no path."""
    host, port = rest_host_port(url)
    return f"http://{host}:{port}"


def _rest(url: str, path: str, *, method: str = "GET", timeout_s: float = 10.0) -> Any:
    request = urllib.request.Request(rest_base(url) + path, method=method)
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        body = response.read()
    return json.loads(body) if body else {}


def cluster_status(url: str) -> ClusterStatus:
    """Ask a session cluster's REST API for its TaskManagers, slots and running jobs.

    Example:
        >>> cluster_status("http://127.0.0.1:8081").slots_total
        2
    """
    try:
        o = _rest(url, "/overview", timeout_s=3.0)
    except (OSError, ValueError) as err:
        return ClusterStatus(False, rest_base(url), f"no Flink REST API at {rest_base(url)} ({err})")
    return ClusterStatus(
        True,
        rest_base(url),
        f"Flink {o.get('flink-version', '?')} session cluster at {rest_base(url)}: "
        f"{o['taskmanagers']} TaskManager(s), {o['slots-available']}/{o['slots-total']} slots free, "
        f"{o['jobs-running']} job(s) running",
        int(o["taskmanagers"]),
        int(o["slots-total"]),
        int(o["slots-available"]),
        int(o["jobs-running"]),
    )


def taskmanager_ids(url: str) -> set[str]:
    """Ids of the TaskManagers registered with the cluster at `url` (empty if it does not answer)."""
    try:
        return {str(tm["id"]) for tm in _rest(url, "/taskmanagers", timeout_s=3.0)["taskmanagers"]}
    except (OSError, ValueError, KeyError):
        return set()


class ClusterJob:
    """The stream job on a session cluster, through its REST API (a `pi_jobs.stream.driver.JobHandle`).

    Example:
        >>> job = submit_stream_job(config, "http://127.0.0.1:8081")
        >>> job.status()
        'RUNNING'
    """

    def __init__(self, url: str, job_id: str, log_dir: Path) -> None:
        self.url = rest_base(url)
        self.job_id = job_id
        self.log_dir = log_dir

    def status(self) -> str:
        """Flink's job state (RUNNING, RESTARTING, FAILED, ...).

        Raises:
            OSError: the REST API did not answer three times in a row (the driver then treats
                the job as failed, so a slow answer on a loaded host gets retries first).
        """
        failures = 0
        while True:
            try:
                return str(_rest(self.url, f"/jobs/{self.job_id}")["state"]).upper()
            except urllib.error.HTTPError:  # an answer, e.g. 404: no such job
                raise
            except OSError:
                failures += 1
                if failures == 3:
                    raise
                time.sleep(2.0)

    def failure(self) -> str:
        """The job's root exception, cut to the Python traceback's end when there is one."""
        from pi_jobs.stream._logs import python_error

        try:
            root = str(_rest(self.url, f"/jobs/{self.job_id}/exceptions").get("root-exception") or "")
        except (OSError, ValueError) as err:
            return f"(the cluster did not say why: {err})"
        return python_error(root) or root[-4000:] or "(the cluster reports no exception)"

    def cancel(self, *, timeout_s: float = 120.0) -> None:
        """Cancel the job and wait until it has ended; nothing happens if it already has.

        Raises:
            StreamJobError: it was still running `timeout_s` after the request.
        """
        try:
            _rest(self.url, f"/jobs/{self.job_id}?mode=cancel", method="PATCH")
            state = self.status()
        except urllib.error.HTTPError:  # 404/409: already gone
            return
        except OSError as err:  # the cluster is gone: so is the job
            log.warning("cannot cancel job %s at %s: %s", self.job_id, self.url, err)
            return
        # the REST call only starts the cancellation; its tasks (and Python workers) stop after
        deadline = time.monotonic() + timeout_s
        while state not in _ENDED:
            if time.monotonic() > deadline:
                raise StreamJobError(
                    f"job {self.job_id} still {state} {timeout_s:.0f} s after it was cancelled; "
                    f"cancel it in the Flink UI at {self.url}"
                )
            time.sleep(0.5)
            with contextlib.suppress(OSError):
                state = self.status()

    def checkpoints(self) -> CheckpointCounts:
        """Completed checkpoints, and the checkpoint the job last restored from."""
        doc = _rest(self.url, f"/jobs/{self.job_id}/checkpoints")
        restored = (doc.get("latest") or {}).get("restored")
        return CheckpointCounts(int(doc["counts"]["completed"]), int(restored["id"]) if restored else None)


def submit_stream_job(config: StreamJobConfig, url: str, *, timeout_s: float = 300.0) -> ClusterJob:
    """Submit the stream job to the session cluster at `url` (`flink run -d -py`), detached.

    The job's files (lake, catalog, progress, checkpoints) are the config's paths as the
    TaskManagers see them: this machine's for the local cluster, shared storage otherwise.

    Raises:
        StackError: no cluster answers at `url`.
        StreamJobError: the job already runs there, it has fewer free slots than the job's
            parallelism, or `flink run` failed (the message quotes its output).

    Example:
        >>> submit_stream_job(config, "http://127.0.0.1:8081").job_id
        'a1b2c3d4...'
    """
    from pi_jobs.stream.job import config_to_json, submitted_job_name

    status = cluster_status(url)
    if not status.running:
        raise StackError(f"{status.detail}; start one with `pilake up --flink` or check the URL")
    name = submitted_job_name(config)
    for other in _rest(url, "/jobs/overview")["jobs"]:
        if other["name"] == name and other["state"] not in _ENDED:
            raise StreamJobError(
                f"job {other['jid']} ({name}) is already {other['state']} on {status.url}: one "
                f"job per consumer group (their lake writers would collide); cancel it first "
                f"(`curl -X PATCH '{status.url}/jobs/{other['jid']}?mode=cancel'`)"
            )
    if status.slots_available < config.parallelism:
        raise StreamJobError(
            f"the cluster at {status.url} has {status.slots_available} free task slots of "
            f"{status.slots_total} and the job needs {config.parallelism} (--parallelism): start "
            "more TaskManagers, cancel other jobs or lower the parallelism"
        )
    submit_dir = config.work_dir / "submit"
    submit_dir.mkdir(parents=True, exist_ok=True)
    launcher = submit_dir / "launch_stream_job.py"
    launcher.write_text(_LAUNCHER)
    config_path = submit_dir / f"config-{os.getpid()}-{time.time_ns()}.json"
    # client_options may hold credentials: owner-only, and gone once the client has read it
    fd = os.open(config_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(config_to_json(config))
    host, port = rest_host_port(url)
    config.log_dir.mkdir(parents=True, exist_ok=True)
    cmd = [
        str(flink_home() / "bin" / "flink"), "run", "-m", f"{host}:{port}", "-d",
        "-p", str(config.parallelism),
        "-py", str(launcher), "-pyexec", sys.executable, "-pyclientexec", sys.executable,
        str(config_path),
    ]  # fmt: skip
    env = {**os.environ, "FLINK_LOG_DIR": str(config.log_dir), "OPENBLAS_NUM_THREADS": "1"}
    try:
        proc = subprocess.run(
            cmd,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    finally:
        config_path.unlink(missing_ok=True)
    out = proc.stdout + proc.stderr
    found = _JOB_ID.search(out)
    if proc.returncode != 0 or found is None:
        from pi_jobs.stream._logs import python_error

        reason = python_error(out) or out.strip()[-3000:]
        raise StreamJobError(
            f"`flink run` could not submit the stream job to {status.url} (exit {proc.returncode}):\n"
            f"{reason}\nclient logs in {config.log_dir}"
        )
    return ClusterJob(url, found.group(1) or found.group(2), config.log_dir)
