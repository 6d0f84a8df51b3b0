"""The harness under every fault scenario: an isolated installation (home, Tansu broker, jars),
`pilake stream` in a process group of its own, uploaders, and `pilake audit` run as a user would.

Everything runs as real processes: the stream job and the audit through the installed `pilake`
command (never by importing the CLI), the broker through `pi_jobs.local.stack`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

log = logging.getLogger("pi_jobs.local.faults")

# Generous upper bounds for a loaded 2-core machine; the scenarios finish far sooner normally.
STREAM_START_TIMEOUT_S = 180.0
CONFIRM_TIMEOUT_S = 300.0
# Uploaders re-send an unacknowledged episode after this long (production default: 120 s).
RESEND_AFTER_S = 20.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pilake() -> str:
    exe = Path(sys.executable).with_name("pilake")
    if not exe.exists():
        raise RuntimeError(f"the pilake command is not installed next to {sys.executable}")
    return str(exe)


def _group_pids(pgid: int) -> list[int]:
    """Live processes of a process group (from /proc; zombies excluded)."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            pids.append(int(stat.parent.name))
    return sorted(pids)


class StreamProcess:
    """`pilake stream` running in a process group of its own."""

    def __init__(self, proc: subprocess.Popen[bytes], log_path: Path) -> None:
        self.proc = proc
        self.log_path = log_path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def kill_group(self) -> tuple[list[int], list[int]]:
        """SIGKILL every process of the job (driver, JVM, Python workers).

        Returns:
            (pids of the group before the kill, pids still alive 10 s after it).
        """
        before = _group_pids(self.pid)
        os.killpg(self.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)
        deadline = time.monotonic() + 10
        while _group_pids(self.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        return before, _group_pids(self.pid)

    def stop(self, timeout_s: float = 60.0) -> int:
        """Ctrl-C the driver (it cancels the job and exits); SIGKILL the group if it hangs."""
        if self.alive():
            os.kill(self.pid, signal.SIGINT)
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                log.warning("stream job did not stop on SIGINT within %.0f s; killing it", timeout_s)
        with contextlib.suppress(ProcessLookupError):
            if _group_pids(self.pid):
                os.killpg(self.pid, signal.SIGKILL)
        return self.proc.wait(timeout=30)


class FaultStack:
    """One isolated installation: home, broker, stream job processes, uploaders, audit.

    Example:
        >>> with FaultStack(tmp_path / "home", jar_cache=Path(".pilake/jars")) as stack:
        ...     stack.start_broker()
    """

    def __init__(self, home: Path, *, jar_cache: Path) -> None:
        from pi_jobs.settings import Settings
        from pi_jobs.stream.connector_jars import ensure_connector_jars

        port = _free_port()
        self.settings = Settings(home=Path(home), broker_port=port, bootstrap_servers=f"127.0.0.1:{port}")
        self.home = self.settings.home
        self.home.mkdir(parents=True, exist_ok=True)
        # the jars are the same for every home: copy them rather than download them each time
        self.settings.jar_dir.mkdir(parents=True, exist_ok=True)
        for jar in ensure_connector_jars(jar_cache):
            shutil.copy2(jar, self.settings.jar_dir / jar.name)
        self.streams: list[StreamProcess] = []
        self.spool_dirs: list[Path] = []

    def __enter__(self) -> FaultStack:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        from pi_jobs.local.stack import stop_broker

        for s in self.streams:
            with contextlib.suppress(Exception):
                s.stop(timeout_s=20)
        stop_broker(self.settings)

    # -- broker ------------------------------------------------------------------------------
    @property
    def bootstrap(self) -> str:
        return self.settings.bootstrap_servers

    def start_broker(self) -> None:
        from pi_jobs.local.stack import ensure_topics, start_broker

        start_broker(self.settings)
        ensure_topics(self.bootstrap)

    def restart_broker(self) -> None:
        from pi_jobs.local.stack import stop_broker

        stop_broker(self.settings)
        self.start_broker()

    # -- stream job --------------------------------------------------------------------------
    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "PILAKE_HOME": str(self.home),
            "PILAKE_BROKER_PORT": str(self.settings.broker_port),
            "PILAKE_BOOTSTRAP": self.bootstrap,
            "OPENBLAS_NUM_THREADS": "1",
        }

    def start_stream(self, *args: str, extra_env: Mapping[str, str] | None = None) -> StreamProcess:
        """Start `pilake stream ARGS` in a new session (its own process group)."""
        log_path = self.home / f"stream-{len(self.streams)}.log"
        with open(log_path, "wb") as out:
            proc = subprocess.Popen(
                [_pilake(), "stream", *args],
                env={**self.env(), **(extra_env or {})},
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        stream = StreamProcess(proc, log_path)
        self.streams.append(stream)
        return stream

    def run_stream(self, *args: str, timeout_s: float = 300.0) -> tuple[int, str]:
        """Run `pilake stream ARGS` to its end; (exit code, output)."""
        stream = self.start_stream(*args)
        try:
            code = stream.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            code = stream.stop()
        return code, stream.output()

    def flink_restarts(self) -> int:
        """How often Flink restarted the job inside its runs (its bounded restart strategy),
        from the JobManager lines in the Flink logs."""
        count = 0
        for path in (self.settings.flink_dir / "log").glob("*.log"):
            count += path.read_text(errors="replace").count("switched from state RUNNING to RESTARTING")
        return count

    def progress(self) -> dict[str, Any]:
        """The stream job's progress, all sink subtasks added up."""
        from pi_jobs.stream.driver import read_progress

        return read_progress(self.settings.flink_dir / "progress.json")

    def wait_progress(
        self, stream: StreamProcess, done: Callable[[dict[str, Any]], bool], timeout_s: float, what: str
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while True:
            p = self.progress()
            if done(p):
                return p
            if not stream.alive():
                raise RuntimeError(f"stream job exited while waiting for {what}:\n{stream.output()[-3000:]}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {what} within {timeout_s:.0f} s; progress {p}")
            time.sleep(0.2)

    # -- uploaders ---------------------------------------------------------------------------
    def uploader(self, name: str, *, resend_after_s: float = RESEND_AFTER_S) -> Any:
        """An uploader with its own spool in this stack. `resend_after_s`: how long an
        unacknowledged episode waits before it is sent again; a test that must prove the stream
        job recovered by itself sets it beyond the test's length, so no re-send can deliver."""
        from pi_ingest import Uploader, UploaderConfig

        spool = self.home / f"spool-{name}"
        self.spool_dirs.append(spool)
        return Uploader(
            UploaderConfig(
                self.bootstrap,
                spool,
                resend_after_s=resend_after_s,
                delivery_timeout_s=5.0,
                backoff_initial_s=0.2,
                backoff_max_s=2.0,
            )
        )

    # -- audit -------------------------------------------------------------------------------
    def audit(self, *, topic: bool = True) -> dict[str, Any]:
        """`pilake audit --json` over this stack's spools, lake, catalog (and topic)."""
        return run_audit(self.env(), self.spool_dirs, topic=topic)


def run_audit(env: Mapping[str, str], spool_dirs: list[Path], *, topic: bool) -> dict[str, Any]:
    """Run `pilake audit --json` as a user would; its report, with the exit code under "exit_code".

    The exit code must say the same as the report (0 iff ok), else this raises.
    """
    import json

    cmd = [_pilake(), "audit", "--json", *(a for p in spool_dirs for a in ("--spool", str(p)))]
    if not topic:
        cmd.append("--no-topic")
    proc = subprocess.run(cmd, env=dict(env), capture_output=True, text=True, timeout=300, check=False)
    try:
        doc: dict[str, Any] = json.loads(proc.stdout)
    except ValueError as err:
        raise RuntimeError(f"pilake audit exited {proc.returncode}: {proc.stdout}{proc.stderr}") from err
    if (proc.returncode == 0) != bool(doc["ok"]):
        raise RuntimeError(f"pilake audit exited {proc.returncode} but its report says ok={doc['ok']}")
    doc["exit_code"] = proc.returncode
    return doc


def confirm_all(up: Any, stream: StreamProcess, timeout_s: float = CONFIRM_TIMEOUT_S) -> Any:
    """Run uploader `up` until the lake confirmed all it holds; raise with the job's log if not."""
    report = up.run_until_confirmed(timeout_s=timeout_s)
    if report.pending:
        raise TimeoutError(
            f"{len(report.pending)} episodes never confirmed: {list(report.pending)[:5]}; stream job "
            f"alive={stream.alive()}:\n{stream.output()[-3000:]}"
        )
    return report
