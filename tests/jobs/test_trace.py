"""`pilake trace`: one episode followed from the uploader through the real stream job (on the
session's Tansu broker and a local Flink mini-cluster) to the lake, the catalog and the loader,
from the JSON event logs (pi_format.jsonlog) and the tables."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pi_format.jsonlog import EVENT_LOG_DIR_ENV

from tests.fixtures.stream_jobs import small_stream_job

integration = pytest.mark.integration


@dataclass
class Traced:
    good: str  # an episode the job commits
    bad: str  # an episode the contract rejects (unknown robot type)
    logs: Path
    env: dict[str, str]


@pytest.fixture(scope="module")
def traced(broker: str, stack_settings: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Traced]:
    from confluent_kafka.admin import AdminClient, NewTopic
    from pi_ingest import Uploader, UploaderConfig
    from pi_jobs.stream import run_stream_job
    from pi_loader import Dataset

    from tests.jobs.test_stream_job import _episode

    work = tmp_path_factory.mktemp("trace")
    logs = work / "events"
    run = uuid.uuid4().hex[:8]
    raw_topic, ack_topic = f"tr-raw-{run}", f"tr-ack-{run}"
    admin = AdminClient({"bootstrap.servers": broker})
    for future in admin.create_topics([NewTopic(raw_topic, 2, 1), NewTopic(ack_topic, 1, 1)]).values():
        future.result(timeout=10)
    good = [_episode(i) for i in range(2)]
    bad = _episode(5)
    bad = dataclasses.replace(bad, meta=dataclasses.replace(bad.meta, robot_type="no-such-robot"))
    previous = os.environ.get(EVENT_LOG_DIR_ENV)
    os.environ[EVENT_LOG_DIR_ENV] = str(logs)  # as `pilake` sets it: every component logs here
    try:
        config = UploaderConfig(broker, work / "spool", raw_topic=raw_topic, ack_topic=ack_topic)
        with Uploader(config) as up:
            for ep in [*good, bad]:
                up.submit(ep)
            assert up.send_pending() > 0
            job = small_stream_job(
                broker=broker,
                root=work,
                jar_dir=stack_settings.jar_dir,
                raw_topic=raw_topic,
                ack_topic=ack_topic,
                group_id=f"tr-group-{run}",
            )
            report = run_stream_job(job, until_idle=True, idle_timeout_s=2.0, max_runtime_s=240)
            assert (report.episodes_committed, report.quarantined) == (2, 1)
            deadline = time.monotonic() + 120
            while len(up.spool) and time.monotonic() < deadline:
                up.poll_acks(1.0)
            assert len(up.spool) == 0, "the uploader got no ack for every episode"
        Dataset(job.lake_root, episode_ids=[good[0].episode_id], action_horizon=4)  # the loader's events
    finally:
        if previous is None:
            os.environ.pop(EVENT_LOG_DIR_ENV, None)
        else:
            os.environ[EVENT_LOG_DIR_ENV] = previous
    from pi_catalog import Catalog

    Catalog(job.catalog_path).close()  # hand the chdb path to the CLI processes
    env = {
        **os.environ,
        "PILAKE_HOME": str(work / "home"),
        "PILAKE_LAKE": job.lake_root,
        "PILAKE_CATALOG": job.catalog_path,
    }
    yield Traced(good[0].episode_id, bad.episode_id, logs, env)


def _trace(t: Traced, episode_id: str, *extra: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "pi_jobs.cli", "trace", episode_id, "--logs", str(t.logs), *extra]
    return subprocess.run(cmd, env=t.env, capture_output=True, text=True, timeout=300)


@integration
def test_trace_follows_a_committed_episode(traced: Traced) -> None:
    done = _trace(traced, traced.good, "--json")
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    seen = [(e["source"], e["event"]) for e in events]
    for step in [
        ("uploader", "spooled"),
        ("uploader", "sent"),
        ("stream", "received"),
        ("stream", "validated"),
        ("stream", "committed"),
        ("stream", "catalog_recorded"),
        ("uploader", "acked"),
        ("loader", "opened"),
        ("lake", "raw_received"),
        ("lake", "episodes_row"),
        ("catalog", "indexed"),
        ("catalog", "readable"),
    ]:
        assert step in seen, f"{step} missing from the trace: {seen}"
    ts = [e["ts_ns"] for e in events]
    assert ts == sorted(ts)  # time order
    # the life of an episode happens in this order
    order = [seen.index(s) for s in [("uploader", "spooled"), ("uploader", "sent"), ("stream", "received")]]
    order += [seen.index(s) for s in [("stream", "committed"), ("stream", "catalog_recorded")]]
    order += [seen.index(("uploader", "acked")), seen.index(("loader", "opened"))]
    assert order == sorted(order), seen
    by = {(e["source"], e["event"]): e for e in events}
    attempt = by[("lake", "episodes_row")]["attempt_id"]
    same_attempt = [("stream", "committed"), ("uploader", "acked"), ("loader", "opened")]
    same_attempt.append(("catalog", "readable"))
    for step in same_attempt:
        assert by[step]["attempt_id"] == attempt, step
    assert by[("stream", "committed")]["episodes_version"] >= 1
    assert by[("uploader", "acked")]["status"] == "committed"
    assert by[("catalog", "readable")]["freshness_s"] >= 0

    text = _trace(traced, traced.good)
    assert text.returncode == 0 and f"episode {traced.good}:" in text.stdout
    assert "uploader  sent" in text.stdout and "stream    committed" in text.stdout


@integration
def test_trace_of_a_quarantined_episode_shows_its_reason(traced: Traced) -> None:
    done = _trace(traced, traced.bad, "--json")
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    quarantined = [e for e in events if e["event"] == "quarantined"]
    assert {e["source"] for e in quarantined} == {"stream", "lake"}
    assert all(e["reason"] == "unknown_robot_type" for e in quarantined)
    assert any("no-such-robot" in e["details"] for e in quarantined)
    acked = [e for e in events if e["event"] == "acked"]
    assert [(a["status"], a["reason"]) for a in acked] == [("quarantined", "unknown_robot_type")]
    assert not any(e["event"] in ("committed", "episodes_row", "readable") for e in events)


@integration
def test_trace_of_an_unknown_episode_says_so(traced: Traced) -> None:
    done = _trace(traced, "never-uploaded-episode")
    assert done.returncode == 1
    assert "nothing known about 'never-uploaded-episode'" in done.stdout


# -- pure parts ----------------------------------------------------------------------------------


def test_log_events_pick_one_episode_from_every_file(tmp_path: Path) -> None:
    from pi_format.jsonlog import event_logger, log_event
    from pi_jobs.ops.trace import TraceError, trace_episode

    up = event_logger("test.trace.up", tmp_path / "a" / "uploader-1.jsonl", "uploader")
    job = event_logger("test.trace.job", tmp_path / "b" / "stream-0-2.jsonl", "stream")
    log_event(job, "committed", episode_id="e1", attempt_id="a1", ts_ns=300, episodes_version=4)
    log_event(up, "sent", episode_id="e1", attempt_id=None, ts_ns=100, messages=7)
    log_event(up, "sent", episode_id="e10", attempt_id=None, ts_ns=150)  # another episode
    with (tmp_path / "b" / "stream-0-2.jsonl").open("a") as f:
        f.write('{"episode_id": "e1", "event": "cut')  # a line cut by a crash
    events = trace_episode("e1", layout=None, catalog=None, log_dirs=[tmp_path, tmp_path / "missing"])
    assert [(e.ts_ns, e.source, e.event, e.attempt_id) for e in events] == [
        (100, "uploader", "sent", None),
        (300, "stream", "committed", "a1"),
    ]
    assert events[0].details == {"messages": 7}
    line = "1970-01-01T00:00:00.000000Z  stream    committed  attempt=a1  episodes_version=4"
    assert events[1].line() == line
    with pytest.raises(TraceError, match="non-empty"):
        trace_episode(" ", layout=None, catalog=None, log_dirs=[])


def test_offset_ranges_stay_short() -> None:
    from types import SimpleNamespace

    from pi_jobs.stream._events import offset_ranges

    def msgs(partition: int, offsets: list[int]) -> list[SimpleNamespace]:
        return [SimpleNamespace(partition=partition, offset=o) for o in offsets]

    assert offset_ranges(msgs(1, list(range(1000))) + msgs(0, [4, 9])) == "0:4..9 (2), 1:0..999"
    assert offset_ranges(msgs(2, [5])) == "2:5"
    assert offset_ranges([]) == ""
