"""Fault scenarios on real components: each starts real processes, breaks them, and audits.

Used by tests/faults (assertions) and benchmarks/faults/run.py (the report). Every scenario
gets its own home (lake, catalog, spools, Flink work dir) and its own Tansu broker on a free
port, runs the stream job as `pilake stream` in a process group of its own (driver, Flink JVM
and Python workers), and ends with `pi_jobs.audit.audit`: episodes in, visible, quarantined,
lost (missing) and duplicated.

| scenario | the fault |
| --- | --- |
| `kill_stream_job` | SIGKILL of the whole stream job mid-run, then a restart |
| `broker_restart` | the broker stops and restarts (losing every record) while two uploaders run |
| `bad_bytes` | corrupted, truncated, oversize, unknown-version messages and `kcat` garbage |
| `concurrent_writers` | two processes commit to the same Delta tables at once |
| `lake_unwritable` | the lake's files become immutable: the job must fail loudly, then resume |
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger("benchmarks.faults")

# Generous upper bounds for a loaded 2-core machine; the scenarios finish far sooner normally.
STREAM_START_TIMEOUT_S = 180.0
CONFIRM_TIMEOUT_S = 300.0
# Uploaders re-send an unacknowledged episode after this long (production default: 120 s).
RESEND_AFTER_S = 20.0


@dataclass(frozen=True, slots=True)
class FaultResult:
    """The outcome of one scenario: the audit's counts plus what the scenario observed."""

    fault: str
    episodes_in: int
    visible: int
    quarantined: int
    lost: int
    duplicated: int
    elapsed_s: float
    observed: Mapping[str, Any] = field(default_factory=dict)
    audit: Mapping[str, Any] = field(default_factory=dict)

    def row(self) -> str:
        return (
            f"{self.fault:<20} in {self.episodes_in:>3}  visible {self.visible:>3}  quarantined "
            f"{self.quarantined:>3}  lost {self.lost:>2}  duplicated {self.duplicated:>2}  "
            f"({self.elapsed_s:.0f} s)"
        )


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
        from pi_jobs.connector_jars import ensure_connector_jars
        from pi_jobs.settings import Settings

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
        from pi_jobs.stack import stop_broker

        for s in self.streams:
            with contextlib.suppress(Exception):
                s.stop(timeout_s=20)
        stop_broker(self.settings)

    # -- broker ------------------------------------------------------------------------------
    @property
    def bootstrap(self) -> str:
        return self.settings.bootstrap_servers

    def start_broker(self) -> None:
        from pi_jobs.stack import ensure_topics, start_broker

        start_broker(self.settings)
        ensure_topics(self.bootstrap)

    def restart_broker(self) -> None:
        from pi_jobs.stack import stop_broker

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

    def start_stream(self, *args: str) -> StreamProcess:
        """Start `pilake stream ARGS` in a new session (its own process group)."""
        log_path = self.home / f"stream-{len(self.streams)}.log"
        with open(log_path, "wb") as out:
            proc = subprocess.Popen(
                [_pilake(), "stream", *args],
                env=self.env(),
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
        import json

        try:
            doc: dict[str, Any] = json.loads((self.settings.flink_dir / "progress.json").read_text())
            return doc
        except (OSError, ValueError):
            return {}

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
    def uploader(self, name: str) -> Any:
        from pi_ingest import Uploader, UploaderConfig

        spool = self.home / f"spool-{name}"
        self.spool_dirs.append(spool)
        return Uploader(
            UploaderConfig(
                self.bootstrap,
                spool,
                resend_after_s=RESEND_AFTER_S,
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


def simulated(seed: int, robots: int, episodes: int) -> list[Any]:
    """Small real episodes (rendered scenes, H.264 MP4), distinct ids per seed."""
    from pi_ingest.simulator import SimulationConfig, simulate_fleet

    cfg = SimulationConfig(
        robots=robots,
        episodes_per_robot=episodes,
        duration_s=1.0,
        camera_width=160,
        camera_height=120,
        cameras=("cam_high",),
        seed=seed,
    )
    return [s.episode for s in simulate_fleet(cfg)]


def _result(fault: str, report: Mapping[str, Any], t0: float, observed: Mapping[str, Any]) -> FaultResult:
    result = FaultResult(
        fault=fault,
        episodes_in=int(report["episodes_in"]),
        visible=int(report["visible"]),
        quarantined=int(report["quarantined"]),
        lost=int(report["missing"]),
        duplicated=int(report["duplicated"]),
        elapsed_s=time.monotonic() - t0,
        observed=dict(observed),
        audit=dict(report),
    )
    log.info("fault %s", result.row())
    return result


def _confirm_all(up: Any, stream: StreamProcess, timeout_s: float = CONFIRM_TIMEOUT_S) -> Any:
    report = up.run_until_confirmed(timeout_s=timeout_s)
    if report.pending:
        raise TimeoutError(
            f"{len(report.pending)} episodes never confirmed: {list(report.pending)[:5]}; stream job "
            f"alive={stream.alive()}:\n{stream.output()[-3000:]}"
        )
    return report


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
            first = stack.start_stream()
            p = stack.wait_progress(
                first, lambda p: p.get("committed", 0) >= 2, STREAM_START_TIMEOUT_S, "2 commits"
            )
            killed, survivors = first.kill_group()
            committed_before = stack.progress().get("committed", 0)
            second = stack.start_stream()
            upload = _confirm_all(up, second)
            second_progress = stack.progress()
            second.stop()
        report = stack.audit()
    return _result(
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
    return _result(
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


# -- 3. bad bytes -----------------------------------------------------------------------------
def _with_version(message: bytes, version: int) -> bytes:
    return message[:4] + struct.pack(">H", version) + message[6:]


def _payload_start(message: bytes) -> int:
    id_len, stream_len = struct.unpack(">HH", message[20:24])
    return 24 + id_len + stream_len


def bad_messages(seed: int) -> tuple[list[tuple[str, bytes]], dict[str, str]]:
    """(key, value) messages that must be quarantined, and the reason expected per episode id."""
    from pi_format.wire import encode_episode

    eps = simulated(seed, robots=1, episodes=4)
    corrupt, truncated, oversize, v2 = eps
    out: list[tuple[str, bytes]] = []
    # one bit flipped in the payload of one chunk of an otherwise intact episode
    msgs = list(encode_episode(corrupt))
    i = 1
    start = _payload_start(msgs[i])
    flipped = bytearray(msgs[i])
    flipped[start + 3] ^= 0x10
    msgs[i] = bytes(flipped)
    out += [(corrupt.episode_id, m) for m in msgs]
    # chunk 0 cut inside its stream name (its episode id is still readable)
    msgs = encode_episode(truncated)
    id_len = struct.unpack(">H", msgs[0][20:22])[0]
    out.append((truncated.episode_id, msgs[0][: 24 + id_len + 2]))
    out += [(truncated.episode_id, m) for m in msgs[1:]]
    # a 1.5 MB message: a real chunk padded past the 1,000,000-byte limit
    msgs = encode_episode(oversize)
    out += [(oversize.episode_id, msgs[0] + bytes(1_500_000))]
    # a robot speaking protocol version 2
    out += [(v2.episode_id, _with_version(m, 2)) for m in encode_episode(v2)]
    expected = {
        corrupt.episode_id: "chunk_checksum",
        truncated.episode_id: "truncated",
        oversize.episode_id: "oversize",
        v2.episode_id: "unsupported_version",
    }
    return out, expected


# each at least 24 bytes (a header's length) without the PIEP magic: bad_magic, no episode id
KCAT_GARBAGE = [
    b"garbage from an independent kafka client",
    b'{"not": "a pi-lake chunk", "at": "all"}',
    b"\x00\x01\x02\x03 binary junk of thirty-odd bytes",
]


def _bundled_librdkafka_dir(work: Path) -> Path | None:
    """A directory holding `librdkafka.so.1` -> the librdkafka bundled in the confluent-kafka
    wheel (None when that wheel has none)."""
    import confluent_kafka

    libs = Path(confluent_kafka.__file__).parent.parent / "confluent_kafka.libs"
    found = sorted(libs.glob("librdkafka*.so*"))
    if not found:
        return None
    work.mkdir(parents=True, exist_ok=True)
    link = work / "librdkafka.so.1"
    link.unlink(missing_ok=True)
    link.symlink_to(found[0])
    return work


def kcat_produce(bootstrap: str, topic: str, lines: list[bytes], *, work: Path) -> str:
    """Write one message per line with `kcat -P` (no key), an independent Kafka client.

    Debian's kcat 1.7.1 links librdkafka 2.0.2, which cannot parse the ApiVersions v3 response
    of Tansu 0.6.0 ("Read underflow ... at 274/279"); the same kcat binary then runs against
    the newer librdkafka bundled in the confluent-kafka wheel (LD_LIBRARY_PATH). Returns which
    library was used.
    """
    kcat = shutil.which("kcat") or shutil.which("kafkacat")
    if kcat is None:
        raise RuntimeError("kcat is not installed (apt-get install kcat; scripts/setup.sh installs it)")
    data = b"\n".join(lines) + b"\n"
    cmd = [kcat, "-P", "-b", bootstrap, "-t", topic]
    proc = subprocess.run(cmd, input=data, capture_output=True, timeout=60, check=False)
    used = "system librdkafka"
    if proc.returncode != 0 and b"ApiVersionRequest failed" in proc.stderr:
        lib_dir = _bundled_librdkafka_dir(work)
        if lib_dir is not None:
            env = {**os.environ, "LD_LIBRARY_PATH": str(lib_dir)}
            proc = subprocess.run(cmd, input=data, capture_output=True, timeout=60, check=False, env=env)
            used = "confluent-kafka's bundled librdkafka (system librdkafka 2.0.2 fails with Tansu)"
    if proc.returncode != 0:
        raise RuntimeError(f"kcat exited {proc.returncode}: {proc.stderr.decode(errors='replace')[-1000:]}")
    return used


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
            upload = _confirm_all(up, stream)
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
    return _result(
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
            "quarantine_reasons": {k: sorted(set(v)) for k, v in reasons.items()},
            "quarantine_rows": len(rows),
            "stream_job_alive_after": job_alive,
        },
    )


# -- 4. two writers on one Delta table --------------------------------------------------------
def _writer_process(lake_root: str, episodes: list[Any], barrier: Any, out: Any) -> None:
    from pi_format import LakeLayout
    from pi_jobs.featurize import FeaturizeConfig, featurize
    from pi_jobs.lake_writer import LakeWriter

    config = FeaturizeConfig(video_width=64, video_height=64, chunk_frames=10)
    writer = LakeWriter(LakeLayout(lake_root))
    featurized = [
        featurize(
            ep,
            attempt_id=f"{os.getpid()}-{ep.episode_id}",
            received_at_ns=time.time_ns(),
            raw_size_bytes=0,
            committed_at_ns=time.time_ns(),
            config=config,
        )
        for ep in episodes
    ]
    barrier.wait()  # both start committing at the same instant
    versions = [writer.commit_episode(f) for f in featurized]
    out.put((versions, writer.commit_conflicts))


def concurrent_writers(home: Path, jar_cache: Path, *, seed: int = 7400) -> FaultResult:
    """Two processes commit to the same lake at once; 3 of their episodes overlap."""
    from pi_catalog import Catalog
    from pi_format import TABLE_SCHEMAS, LakeLayout
    from pi_format.wire import encode_episode
    from pi_ingest import Spool

    t0 = time.monotonic()
    episodes = simulated(seed, robots=3, episodes=3)  # 9
    home.mkdir(parents=True, exist_ok=True)
    layout = LakeLayout(str(home / "lake"))
    from deltalake import DeltaTable

    for name, schema in TABLE_SCHEMAS.items():  # created once, so the race is on commits only
        DeltaTable.create(layout.table(name), schema=schema, mode="ignore")
    spool = Spool(home / "spool-writers")  # the ledger of what was produced
    for ep in episodes:
        spool.add(ep.episode_id, encode_episode(ep))
    # the 3 shared episodes come first in both lists, so both writers race for the same commits
    parts = [episodes[3:6] + episodes[:3], episodes[3:]]
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(len(parts))
    out = ctx.Queue()
    procs = [ctx.Process(target=_writer_process, args=(layout.root, part, barrier, out)) for part in parts]
    for p in procs:
        p.start()
    results = [out.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    exit_codes = [p.exitcode for p in procs]
    refused = sum(1 for versions, _ in results for v in versions if v < 0)
    conflicts = sum(c for _, c in results)
    catalog_path = str(home / "catalog")
    Catalog(catalog_path).rebuild_from_lake(layout)

    env = {**os.environ, "PILAKE_HOME": str(home)}  # its lake and catalog are home/lake, home/catalog
    report = run_audit(env, [home / "spool-writers"], topic=False)
    return _result(
        "concurrent_writers",
        report,
        t0,
        {
            "writers": len(parts),
            "episodes": len(episodes),
            "commits_attempted": sum(len(p) for p in parts),
            "commits_refused_as_already_committed": refused,
            "commit_races_lost": conflicts,
            "writer_exit_codes": exit_codes,
            "episodes_table_version": DeltaTable(layout.episodes).version(),
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
            _confirm_all(up, stream)
            lake = Path(stack.settings.lake_root)
            with unwritable(lake) as works:
                if not works:
                    raise RuntimeError(f"could not make {lake} unwritable here (chattr/chmod refused)")
                for ep in rest:
                    up.submit(ep)
                up.send_pending()
                try:  # the running job must fail by itself (after its bounded restarts)
                    failed_code = stream.proc.wait(timeout=STREAM_START_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    failed_code = stream.stop()
                failed_output = stream.output()
                flink_restarts = stack.flink_restarts()  # the next run's JVM rewrites the log
                committed_while_unwritable = up.poll_acks(0.5)
            named = [line.strip() for line in failed_output.splitlines() if str(lake) in line]
            stream = stack.start_stream()
            upload = _confirm_all(up, stream)
            stream.stop()
        report = stack.audit()
    return _result(
        "lake_unwritable",
        report,
        t0,
        {
            "episodes": len(episodes),
            "committed_before_fault": len(first),
            "acked_while_unwritable": len(committed_while_unwritable),
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
