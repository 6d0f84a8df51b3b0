"""An uploader that never hangs: its calls return while the broker is starved, gone or mute.

Each test starts a broker of its own (the session's is never stopped), runs a robot's uploader
session in a child process (`tests/fixtures/uploader_liveness.py`) that brings on the fault
while it publishes, polls acks, closes and restarts, and fails if the child does not finish
within `HANG_S` — a call that never returns fails the test instead of hanging CI. Then the
broker comes back and every episode must be delivered, acknowledged once and gone from the
spool. The lake's side is played by the test (it reads the raw topic back and publishes the
acks, as in test_uploader; the end-to-end tests cover the real stream job).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pi_format.wire import EpisodeAssembler, decode_chunk
from pi_ingest import Uploader, UploaderConfig
from pi_ingest.spool import read_ledger

from tests.conftest import _free_port
from tests.fixtures.uploader_liveness import simulated
from tests.ingest.test_uploader import WAIT_S, ack, assert_same_episode, publish, read_raw, wait_confirmed

integration = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
# The child's session takes ~10-15 s on a loaded 2-core machine; a call that never returns
# takes forever. 90 s tells the two apart without a timed assertion on anything normal.
HANG_S = 90.0
# Generous bound for any single uploader call (each has timeouts of 0.5-3 s in the child).
CALL_BOUND_S = 60.0


@pytest.fixture
def own_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A broker of this test's own, so stopping or killing it disturbs no other test."""
    from pi_jobs.local.stack import broker_status, ensure_topics, start_broker, stop_broker
    from pi_jobs.settings import Settings

    port = _free_port()
    settings = Settings(
        home=tmp_path_factory.mktemp("liveness-broker"),
        broker_port=port,
        bootstrap_servers=f"127.0.0.1:{port}",
    )
    start_broker(settings)
    ensure_topics(settings.bootstrap_servers)
    pid = broker_status(settings).pid
    try:
        yield settings
    finally:
        if pid is not None:  # a stopped broker cannot take SIGTERM; SIGCONT on a dead pid is harmless
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        stop_broker(settings)


def run_robot(fault: str, settings: Any, spool: Path, seed: int) -> dict[str, Any]:
    """The child's report; fails the test if the child hangs or crashes."""
    from pi_jobs.local.stack import broker_status

    args = {
        "fault": fault,
        "bootstrap": settings.bootstrap_servers,
        "spool": str(spool),
        "broker_pid": broker_status(settings).pid,
        "seed": seed,
    }
    cmd = [sys.executable, "-m", "tests.fixtures.uploader_liveness", json.dumps(args)]
    try:
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=HANG_S, check=False)
    except subprocess.TimeoutExpired as err:
        err_text = err.stderr.decode(errors="replace") if isinstance(err.stderr, bytes) else err.stderr
        tail = (err_text or "")[-3000:]
        pytest.fail(f"the uploader hung ({fault}): no report within {HANG_S:.0f} s; its log:\n{tail}")
    assert proc.returncode == 0, f"child exited {proc.returncode}:\n{proc.stderr[-3000:]}"
    report: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return report


def assert_kept_its_loop_metrics_and_spool(report: dict[str, Any]) -> None:
    ops = [o["op"] for o in report["ops"]]
    assert ops[-5:] == [
        "close",
        "send after restart (starved)",
        "poll_acks after restart (starved)",
        "scrape metrics (starved)",
        "close after restart",
    ], ops
    slow = [o for o in report["ops"] if o["s"] > CALL_BOUND_S]
    assert not slow, f"calls past {CALL_BOUND_S:.0f} s: {slow}"
    assert report["spooled"] == report["episodes"], "the spool must keep every unacknowledged episode"
    assert report["starved_sent_messages"] == 0
    assert report["send_failures"] >= 1, "a failed send must be counted"
    assert report["scraped_spool_episodes"] == len(report["episodes"])
    assert report["scraped_send_failures"] >= 1


def deliver_once_back(bootstrap: str, spool: Path, seed: int) -> None:
    """With the broker back: every spooled episode is delivered whole, acknowledged once, unspooled."""
    episodes = {e.episode_id: e for e in simulated(seed)}
    expected = sorted(episodes)
    config = UploaderConfig(bootstrap, spool, resend_after_s=0.0, delivery_timeout_s=10.0)
    with Uploader(config) as up:
        assert sorted(e.episode_id for e in up.spool.entries()) == expected
        back_ns = time.time_ns()
        deadline = time.monotonic() + WAIT_S
        while not all((e.last_sent_ns or 0) > back_ns for e in up.spool.entries()):
            assert time.monotonic() < deadline, "the uploader did not deliver after the broker came back"
            up.send_pending()
        values = read_raw(bootstrap, expected)
        for eid, chunks in values.items():
            asm = EpisodeAssembler(eid)
            for v in chunks:
                asm.add(decode_chunk(v))  # identical re-sent chunks are ignored, as the lake does
            assert_same_episode(asm.assemble(), episodes[eid])
        publish(bootstrap, [ack(eid) for eid in expected])
        wait_confirmed(up)
        assert len(up.spool) == 0
        assert sorted(up._acks.committed) == expected
    confirmed = sorted(e.episode_id for e in read_ledger(spool) if e.event == "confirmed")
    assert confirmed == expected, "every episode confirmed exactly once"


@integration
def test_sigstopped_broker(own_broker: Any, tmp_path: Path) -> None:
    report = run_robot("stop", own_broker, tmp_path / "spool", seed=930_001)
    assert_kept_its_loop_metrics_and_spool(report)
    assert report["healthy_sent_messages"] > 0
    os.kill(broker_pid(own_broker), signal.SIGCONT)
    deliver_once_back(own_broker.bootstrap_servers, tmp_path / "spool", seed=930_001)


@integration
def test_teardown_that_never_returns(own_broker: Any, tmp_path: Path) -> None:
    """A Kafka client whose end never returns (librdkafka#4519), with the broker SIGSTOPped:
    the uploader abandons it after close_timeout_s, counts it, and goes on with a fresh one."""
    report = run_robot("stuck", own_broker, tmp_path / "spool", seed=930_002)
    assert_kept_its_loop_metrics_and_spool(report)
    assert report["stalls"]["producer_destroy"] >= 1
    assert report["stalls"]["consumer_close"] >= 1
    os.kill(broker_pid(own_broker), signal.SIGCONT)
    deliver_once_back(own_broker.bootstrap_servers, tmp_path / "spool", seed=930_002)


@integration
def test_sigkilled_broker(own_broker: Any, tmp_path: Path) -> None:
    from pi_jobs.local.stack import ensure_topics, start_broker

    report = run_robot("kill", own_broker, tmp_path / "spool", seed=930_003)
    assert_kept_its_loop_metrics_and_spool(report)
    start_broker(own_broker)  # a new broker on the same port: it remembers nothing
    ensure_topics(own_broker.bootstrap_servers)
    deliver_once_back(own_broker.bootstrap_servers, tmp_path / "spool", seed=930_003)


@integration
def test_broker_that_accepts_but_never_answers(own_broker: Any, tmp_path: Path) -> None:
    report = run_robot("silent", own_broker, tmp_path / "spool", seed=930_004)
    assert_kept_its_loop_metrics_and_spool(report)
    # the robot pointed at a working broker again (the network path repaired)
    deliver_once_back(own_broker.bootstrap_servers, tmp_path / "spool", seed=930_004)


def broker_pid(settings: Any) -> int:
    from pi_jobs.local.stack import broker_status

    pid = broker_status(settings).pid
    assert pid is not None, "the test's broker is gone"
    return pid
