"""The local Flink session cluster (`pilake up --flink`), started from the installed
`apache-flink` wheel: Flink's own `start-cluster.sh` (a JobManager and a TaskManager, separate
JVMs) run with a configuration directory of its own, `<home>/flink/conf`, written from the
settings: REST port, task slots, memory for a small host, checkpoints, logs (`<home>/flink/log`,
next to the embedded job's) and pid files (`<home>/flink/run`, so `stop-cluster.sh` stops this
cluster and no other). Submitting the stream job to it (or to any session cluster) is
`pi_jobs.local.flink_submit`.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from pi_jobs.errors import StackError
from pi_jobs.local.flink_submit import (
    ClusterStatus,
    cluster_status,
    flink_home,
    rest_base,
    rest_host_port,
    taskmanager_ids,
)
from pi_jobs.settings import Settings

DEFAULT_FLINK_URL = "http://127.0.0.1:8081"


@dataclass(frozen=True, slots=True)
class LocalClusterConfig:
    """How `start_local_cluster` sizes the local session cluster.

    Example:
        >>> LocalClusterConfig(slots=2).taskmanager_memory_mb
        4096
    """

    # Two slots: the stream job at parallelism 2, one Python worker per slot.
    slots: int = 2
    # The JobManager only schedules and checkpoints metadata: 1 GB is plenty (Flink's default
    # is 1.6 GB), leaving memory of this shared 24 GB host to the workers.
    jobmanager_memory_mb: int = 1024
    # The TaskManager's JVM plus its managed memory, which Flink reserves for the Python
    # workers (~1 GB each at 1 MB records); 4 GB keeps two slots' workers inside its budget.
    taskmanager_memory_mb: int = 4096
    # A TaskManager that stops answering (hung; a dead one is noticed sooner, from failed
    # heartbeat RPCs) is declared lost after this: 30 s rather than Flink's 50 s, still far
    # above a GC pause on a loaded 2-core machine.
    heartbeat_timeout_ms: int = 30_000
    # Further Flink configuration entries, (key, value) pairs, e.g. a metrics reporter (the keys
    # of deploy/k8s/flink-deployment.yaml's Prometheus reporter); none may replace a key set above.
    extra: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if not 1 <= self.slots <= 64:
            raise ValueError(f"slots must be in [1, 64], got {self.slots}")
        if self.jobmanager_memory_mb < 768:
            raise ValueError(
                f"jobmanager_memory_mb must be >= 768 (Flink's minimum), got {self.jobmanager_memory_mb}"
            )
        if self.taskmanager_memory_mb < 1024:
            raise ValueError(f"taskmanager_memory_mb must be >= 1024, got {self.taskmanager_memory_mb}")
        if self.heartbeat_timeout_ms < 5000:
            raise ValueError(f"heartbeat_timeout_ms must be >= 5000, got {self.heartbeat_timeout_ms}")


def local_cluster_url(settings: Settings) -> str:
    """Where the local cluster's REST API listens: the settings' Flink URL, else port 8081.

    Example:
        >>> local_cluster_url(Settings.from_env())
        'http://127.0.0.1:8081'
    """
    return rest_base(settings.flink_rest_url or DEFAULT_FLINK_URL)


def _conf_dir(settings: Settings) -> Path:
    return settings.flink_dir / "conf"


def _pid_dir(settings: Settings) -> Path:
    return settings.flink_dir / "run"


def cluster_log_dir(settings: Settings) -> Path:
    """The local cluster's JobManager and TaskManager logs (the Python workers' lines included)."""
    return settings.flink_dir / "log"


def _tmp_dir(settings: Settings) -> Path:
    """The cluster's `io.tmp.dirs` (removed when it stops)."""
    return settings.flink_dir / "tmp"


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_cluster_config(settings: Settings, config: LocalClusterConfig) -> Path:
    """Write the local cluster's FLINK_CONF_DIR (config.yaml, masters, workers, log4j files).

    Returns:
        The configuration directory.

    Example:
        >>> write_cluster_config(settings, LocalClusterConfig(slots=2))
        PosixPath('/home/me/.pilake/flink/conf')
    """
    home = flink_home()
    host, rest_port = rest_host_port(local_cluster_url(settings))
    conf = _conf_dir(settings)
    conf.mkdir(parents=True, exist_ok=True)
    for d in (_pid_dir(settings), cluster_log_dir(settings), _tmp_dir(settings)):
        d.mkdir(parents=True, exist_ok=True)
    for name in (
        "log4j.properties",
        "log4j-cli.properties",
        "log4j-console.properties",
        "log4j-session.properties",
    ):
        (conf / name).write_bytes((home / "conf" / name).read_bytes())
    python = sys.executable
    values = {
        "env.pid.dir": str(_pid_dir(settings)),  # stop-cluster.sh then stops this cluster only
        "env.log.dir": str(cluster_log_dir(settings)),
        # the TaskManagers' working dirs and the clients' planner jars (43 MB a run) here, not in
        # /tmp: removed when the cluster stops (a JVM that did not exit cleanly left them there)
        "io.tmp.dirs": str(_tmp_dir(settings)),
        "jobmanager.bind-host": host,
        "jobmanager.rpc.address": host,
        # a free port, fixed in this file: a TaskManager started later must find the JobManager
        "jobmanager.rpc.port": str(_free_port()),
        "jobmanager.memory.process.size": f"{config.jobmanager_memory_mb}m",
        "jobmanager.execution.failover-strategy": "region",
        "taskmanager.bind-host": host,
        "taskmanager.host": host,
        "taskmanager.numberOfTaskSlots": str(config.slots),
        "taskmanager.memory.process.size": f"{config.taskmanager_memory_mb}m",
        "heartbeat.timeout": str(config.heartbeat_timeout_ms),
        # A killed TaskManager is declared lost after 2 failed heartbeat RPCs (Flink's
        # heartbeat.rpc-failure-threshold), so this interval sets how soon its job restarts:
        # ~4 s rather than ~20 s at Flink's 10 s. Heartbeats are tiny; on one host this is free.
        "heartbeat.interval": "2000",
        "rest.address": host,
        "rest.bind-address": host,
        "rest.port": str(rest_port),
        "parallelism.default": "1",
        # the cluster's default; the stream job names its own (the same unless configured)
        "execution.checkpointing.dir": settings.flink_checkpoint_dir
        or (settings.flink_dir / "checkpoints").absolute().as_uri(),
        # "No module named pyflink" otherwise: the workers need this venv's interpreter
        "python.executable": python,
        "python.client.executable": python,
    }
    for key, value in config.extra:
        if key in values:
            raise ValueError(f"LocalClusterConfig.extra may not set {key}: the local cluster sets it itself")
        values[key] = value
    # The JVM flags Flink needs on Java 17, from the wheel's own config.yaml.
    for line in (home / "conf" / "config.yaml").read_text().splitlines():
        if line.strip().startswith("all: --add-"):
            values["env.java.opts.all"] = line.strip()[len("all: ") :]
    (conf / "config.yaml").write_text("".join(f"{k}: {json.dumps(v)}\n" for k, v in values.items()))
    (conf / "masters").write_text(f"{host}:{rest_port}\n")
    (conf / "workers").write_text(f"{host}\n")
    return conf


def _script_env(settings: Settings) -> dict[str, str]:
    python_bin = str(Path(sys.executable).parent)
    return {
        **os.environ,
        "FLINK_CONF_DIR": str(_conf_dir(settings)),
        "FLINK_LOG_DIR": str(cluster_log_dir(settings)),
        "PATH": f"{python_bin}{os.pathsep}{os.environ.get('PATH', '')}",
        # numpy in the workers was 3x slower under core contention with OpenBLAS threads
        "OPENBLAS_NUM_THREADS": "1",
    }


def _run_script(settings: Settings, *args: str, timeout_s: float = 120.0) -> str:
    cmd = [str(flink_home() / "bin" / args[0]), *args[1:]]
    proc = subprocess.run(
        cmd,
        env=_script_env(settings),
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    if proc.returncode != 0:
        raise StackError(
            f"`{' '.join(cmd)}` exited {proc.returncode}: {(proc.stdout + proc.stderr).strip()[-2000:]}; "
            f"logs in {cluster_log_dir(settings)}"
        )
    return proc.stdout


def _daemon_pids(settings: Settings, daemon: str) -> list[int]:
    """Live JVMs of this cluster's `daemon` (standalonesession | taskexecutor), from the pid
    files; a pid counts only if its command line names this cluster's conf dir (pid reuse)."""
    pids: list[int] = []
    for pid_file in _pid_dir(settings).glob(f"*-{daemon}.pid"):
        for word in pid_file.read_text().split():
            with contextlib.suppress(ValueError, OSError):
                cmdline = Path(f"/proc/{int(word)}/cmdline").read_bytes()
                if str(_conf_dir(settings)).encode() in cmdline:
                    pids.append(int(word))
    return sorted(set(pids))


def taskmanager_pids(settings: Settings) -> list[int]:
    """Process ids of the local cluster's running TaskManager JVMs.

    Example:
        >>> os.kill(taskmanager_pids(settings)[0], signal.SIGKILL)  # what the fault test does
    """
    return _daemon_pids(settings, "taskexecutor")


def local_cluster_status(settings: Settings) -> ClusterStatus:
    """The local cluster's state: its REST API's answer, or why it is not running.

    Example:
        >>> local_cluster_status(settings).running
        True
    """
    status = cluster_status(local_cluster_url(settings))
    if not status.running and _daemon_pids(settings, "standalonesession"):
        return ClusterStatus(
            False, status.url, f"JobManager is running but its REST API does not answer: {status.detail}"
        )
    return status


def _wait_for(settings: Settings, slots: int, timeout_s: float, what: str) -> ClusterStatus:
    url = local_cluster_url(settings)
    deadline = time.monotonic() + timeout_s
    while True:
        status = cluster_status(url)
        if status.running and status.slots_total >= slots:
            return status
        if not _daemon_pids(settings, "standalonesession"):
            raise StackError(f"the Flink JobManager exited while starting; see {cluster_log_dir(settings)}")
        if time.monotonic() > deadline:
            raise StackError(
                f"{what} within {timeout_s:.0f} s ({status.detail}); see {cluster_log_dir(settings)}"
            )
        time.sleep(0.5)


def start_local_cluster(
    settings: Settings, config: LocalClusterConfig | None = None, *, timeout_s: float = 180.0
) -> ClusterStatus:
    """Start the local session cluster unless it runs; wait until its REST API reports the slots.

    Raises:
        StackError: the REST port is taken by something else, or the cluster did not come up
            (the message names the log directory).

    Example:
        >>> start_local_cluster(Settings.from_env()).slots_total
        2
    """
    config = config or LocalClusterConfig()
    url = local_cluster_url(settings)
    if _daemon_pids(settings, "standalonesession"):
        return _wait_for(settings, config.slots, timeout_s, "the running cluster did not answer")
    if cluster_status(url).running:
        raise StackError(
            f"another Flink cluster already answers at {url}; stop it, or set PILAKE_FLINK_URL "
            "to a free port (e.g. http://127.0.0.1:18081) for the local cluster"
        )
    from pi_jobs.local.stack import java_version

    java_version()  # a missing Java fails here with its own message, not deep in a script
    write_cluster_config(settings, config)
    _run_script(settings, "start-cluster.sh")
    return _wait_for(settings, config.slots, timeout_s, f"the cluster did not report {config.slots} slots")


def start_taskmanager(settings: Settings, *, timeout_s: float = 120.0) -> ClusterStatus:
    """Start one more TaskManager of the local cluster (e.g. after one died); wait until it registered.

    Raises:
        StackError: it did not register with the JobManager within `timeout_s`.

    Example:
        >>> start_taskmanager(settings).taskmanagers
        1
    """
    url = local_cluster_url(settings)
    # by id: the JobManager lists a killed TaskManager (and its slots) until its heartbeat times out
    before = taskmanager_ids(url)
    _run_script(settings, "taskmanager.sh", "start")
    deadline = time.monotonic() + timeout_s
    while not taskmanager_ids(url) - before:
        if time.monotonic() > deadline:
            raise StackError(
                f"the new TaskManager did not register within {timeout_s:.0f} s; "
                f"see {cluster_log_dir(settings)}"
            )
        time.sleep(0.5)
    return cluster_status(url)


def cluster_processes(settings: Settings) -> list[int]:
    """Every live process of this cluster: its JVMs and their Python workers, including workers
    a killed TaskManager left behind (they outlive it: reparented to init, idle but alive).

    Example:
        >>> cluster_processes(settings)  # after `pilake down`
        []
    """
    marker = b"\0FLINK_CONF_DIR=" + str(_conf_dir(settings)).encode() + b"\0"
    pids = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        with contextlib.suppress(OSError, ValueError):
            pid = int(environ.parent.name)
            if pid != os.getpid() and marker in b"\0" + environ.read_bytes() and _not_zombie(pid):
                pids.append(pid)
    return sorted(pids)


def stop_local_cluster(settings: Settings, *, timeout_s: float = 60.0) -> bool:
    """Stop the local cluster (its scripts first, then signals to whatever of it is left,
    orphaned Python workers included) and wait for its processes to exit.

    Returns:
        True if any of it was running.

    Example:
        >>> stop_local_cluster(settings)
        True
    """
    pids = cluster_processes(settings)
    if not pids:
        return False
    if _daemon_pids(settings, "standalonesession"):
        with contextlib.suppress(StackError, subprocess.TimeoutExpired):
            _run_script(settings, "stop-cluster.sh", timeout_s=timeout_s)
    # stop-cluster.sh stops one TaskManager per workers line: any others (started later) here.
    deadline = time.monotonic() + timeout_s
    sig = signal.SIGTERM
    while True:
        # scanned again each time: a pid that exited may be reused by an unrelated process
        alive = cluster_processes(settings)
        if not alive:
            break
        if time.monotonic() > deadline:
            sig, deadline = signal.SIGKILL, time.monotonic() + timeout_s
        for p in alive:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, sig)
        time.sleep(0.5)
    for pid_file in _pid_dir(settings).glob("*.pid"):
        pid_file.unlink(missing_ok=True)
    shutil.rmtree(_tmp_dir(settings), ignore_errors=True)  # nothing of the cluster runs now
    return True


def _not_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False
