"""Tests of the uploader against the session's real broker (and one broker of its own).

The lake's side is played by the test where needed: it reads the raw topic back with a plain
consumer and publishes `Ack` messages itself, a stand-in for the stream job's acks (the
end-to-end test covers the real job). Seeds are unique per test: the broker is shared.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pi_format import ACK_TOPIC, RAW_TOPIC, Ack, AckStatus, Episode
from pi_format.wire import EpisodeAssembler, decode_chunk, encode_episode, read_bundle, write_bundle
from pi_ingest import (
    BundleError,
    SimulationConfig,
    SpoolError,
    Uploader,
    UploaderConfig,
    simulate_fleet,
    upload_paths,
    write_fleet,
)

TINY = SimulationConfig(
    robots=1,
    episodes_per_robot=2,
    duration_s=1.0,
    camera_width=160,
    camera_height=120,
    cameras=("cam_high", "cam_left_wrist"),
)
WAIT_S = 60.0  # generous upper bound for broker round trips on a loaded 2-core machine


def _episodes(seed: int, count: int = 2) -> list[Episode]:
    cfg = dataclasses.replace(TINY, seed=seed, episodes_per_robot=count)
    return [s.episode for s in simulate_fleet(cfg)]


def read_raw(bootstrap: str, expected: Iterable[str], *, wait_s: float = WAIT_S) -> dict[str, list[bytes]]:
    """Read the raw topic from the beginning until every expected episode is complete.

    End offsets of this broker are wrong, so "done" means: every expected episode assembled.
    """
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    wanted = set(expected)
    asms = {eid: EpisodeAssembler(eid) for eid in wanted}
    values: dict[str, list[bytes]] = {eid: [] for eid in wanted}
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "pi-ingest-test-reader",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
        }
    )
    try:
        parts = consumer.list_topics(RAW_TOPIC, timeout=10).topics[RAW_TOPIC].partitions
        consumer.assign([TopicPartition(RAW_TOPIC, p, OFFSET_BEGINNING) for p in parts])
        deadline = time.monotonic() + wait_s
        while not all(a.is_complete for a in asms.values()) and time.monotonic() < deadline:
            for msg in consumer.consume(500, timeout=0.5):
                if msg.error() is not None:
                    continue
                key, value = msg.key(), msg.value()
                if key is None or value is None:
                    continue
                eid = key.decode()
                if eid in wanted:
                    values[eid].append(value)
                    asms[eid].add(decode_chunk(value))
    finally:
        consumer.close()
    missing = sorted(e for e, a in asms.items() if not a.is_complete)
    assert not missing, f"episodes not complete on {RAW_TOPIC}: {missing}"
    return values


def publish(bootstrap: str, values: Iterable[tuple[str, bytes]], topic: str = ACK_TOPIC) -> None:
    """Test-side stand-in for the stream job publishing acks."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap})
    for key, value in values:
        producer.produce(topic, key=key.encode(), value=value)
    assert producer.flush(30) == 0


def ack(eid: str, status: AckStatus = AckStatus.COMMITTED, reason: str = "") -> tuple[str, bytes]:
    return eid, Ack(eid, status, "test-attempt", time.time_ns(), reason).encode()


def wait_confirmed(up: Uploader, *, wait_s: float = WAIT_S) -> list[Ack]:
    acks: list[Ack] = []
    deadline = time.monotonic() + wait_s
    while len(up.spool) and time.monotonic() < deadline:
        acks.extend(up.poll_acks(1.0))
    return acks


def assert_same_episode(got: Episode, want: Episode) -> None:
    assert got.meta == want.meta
    assert np.array_equal(got.timestamps_ns, want.timestamps_ns)
    assert np.array_equal(got.proprio, want.proprio)
    assert np.array_equal(got.action, want.action)
    assert got.camera_names == want.camera_names
    for g, w in zip(got.cameras, want.cameras, strict=True):
        assert g.spec == w.spec and g.data == w.data
        assert np.array_equal(g.frame_timestamps_ns, w.frame_timestamps_ns)


# -- unit tests (no broker) ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"bootstrap_servers": " "}, "bootstrap_servers must be a non-empty"),
        ({"resend_after_s": -1.0}, "resend_after_s must be a finite number >= 0"),
        ({"delivery_timeout_s": 0.0}, "delivery_timeout_s must be a finite number > 0"),
        ({"backoff_initial_s": float("inf")}, "backoff_initial_s must be a finite number > 0"),
        ({"backoff_initial_s": 5.0, "backoff_max_s": 1.0}, "backoff_max_s must be >= backoff_initial_s"),
        ({"send_rounds": 0}, "send_rounds must be an integer >= 1"),
        ({"raw_topic": "a topic"}, "raw_topic must be"),
        ({"ack_topic": RAW_TOPIC}, "raw_topic and ack_topic must differ"),
        ({"client_options": {"acks": "1"}}, "client_options must not set 'acks'"),
    ],
)
def test_config_validation(tmp_path: Path, changes: dict[str, Any], match: str) -> None:
    base = UploaderConfig("127.0.0.1:1", tmp_path)
    with pytest.raises(ValueError, match=match):
        dataclasses.replace(base, **changes)


def test_config_types(tmp_path: Path) -> None:
    bad: dict[str, Any] = {"ssl.key.password": 1}
    with pytest.raises(TypeError, match="client_options must map str to str"):
        UploaderConfig("127.0.0.1:1", tmp_path, client_options=bad)
    with pytest.raises(TypeError, match="spool_dir must be a Path"):
        UploaderConfig("127.0.0.1:1", 3)  # type: ignore[arg-type]
    assert isinstance(UploaderConfig("h:1", str(tmp_path)).spool_dir, Path)  # type: ignore[arg-type]


def test_repr_hides_client_option_values(tmp_path: Path) -> None:
    cfg = UploaderConfig(
        "127.0.0.1:1", tmp_path, client_options={"sasl.password": "hunter2", "sasl.username": "robot"}
    )
    text = repr(cfg) + str(cfg)
    assert "hunter2" not in text and "robot" not in text
    assert "sasl.password" in text
    with pytest.raises(TypeError):
        cfg.client_options["sasl.password"] = "x"  # type: ignore[index]


def test_submit_bundle_checks(tmp_path: Path) -> None:
    eps = _episodes(seed=920_001)
    a, b = encode_episode(eps[0]), encode_episode(eps[1])
    with Uploader(UploaderConfig("127.0.0.1:1", tmp_path / "spool")) as up:
        good = write_bundle(tmp_path / "good.piep", a)
        entry = up.submit_bundle(good)
        assert entry.episode_id == eps[0].episode_id and entry.message_count == len(a)
        assert up.spool.messages(entry.episode_id) == a
        cases = {
            "mixed.piep": ([*a[:-1], b[-1]], "mixes episodes"),
            "short.piep": (a[:-1], "incomplete"),
            "corrupt.piep": ([a[0][:-1] + bytes([a[0][-1] ^ 1]), *a[1:]], "does not decode"),
        }
        for name, (messages, match) in cases.items():
            with pytest.raises(BundleError, match=match):
                up.submit_bundle(write_bundle(tmp_path / name, messages))
        (tmp_path / "junk.piep").write_bytes(b"not a bundle")
        with pytest.raises(BundleError, match="not a valid bundle"):
            up.submit_bundle(tmp_path / "junk.piep")
        with pytest.raises(BundleError, match="cannot read bundle"):
            up.submit_bundle(tmp_path / "missing.piep")
        with pytest.raises(SpoolError, match="different bytes"):
            up.spool.add(eps[0].episode_id, b)
        assert len(up.spool) == 1


def test_upload_paths_rejects_empty_dir(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    cfg = UploaderConfig("127.0.0.1:1", tmp_path / "spool")
    with pytest.raises(BundleError, match="holds no"):
        upload_paths([tmp_path / "empty"], cfg, wait_s=None, progress=False)
    with pytest.raises(BundleError, match="neither a bundle file"):
        upload_paths([tmp_path / "nope"], cfg, wait_s=None, progress=False)


# -- against the session broker ----------------------------------------------------------------


@pytest.mark.integration
def test_send_read_back_and_confirm(broker: str, tmp_path: Path) -> None:
    eps = _episodes(seed=920_002)
    ids = [e.episode_id for e in eps]
    expected_messages = sum(len(encode_episode(e)) for e in eps)
    with Uploader(UploaderConfig(broker, tmp_path / "spool")) as up:
        for e in eps:
            up.submit(e)
        assert [e.episode_id for e in up.spool.entries()] == ids
        assert up.send_pending() == expected_messages
        assert up.send_pending() == 0  # sent moments ago: not due for a re-send
        assert all(e.attempts == 1 and e.last_sent_ns for e in up.spool.entries())

        values = read_raw(broker, ids)
        for e in eps:
            assert sorted(values[e.episode_id]) == sorted(encode_episode(e))
            asm = EpisodeAssembler(e.episode_id)
            for v in values[e.episode_id]:
                asm.add(decode_chunk(v))
            assert_same_episode(asm.assemble(), e)

        publish(
            broker,
            [
                ("garbage", b"\xff not json"),
                ("sim920002-r999-e00000", ack("sim920002-r999-e00000")[1]),  # not ours
                (
                    "x",
                    b'{"episode_id": "../bad", "status": "committed", "attempt_id": "a", '
                    b'"committed_at_ns": 1}',
                ),
                ack(ids[0]),
                ack(ids[1], AckStatus.QUARANTINED, "bad_values"),
            ],
        )
        acks = wait_confirmed(up)
        assert {(a.episode_id, a.status) for a in acks} == {
            (ids[0], AckStatus.COMMITTED),
            (ids[1], AckStatus.QUARANTINED),
        }
        assert len(up.spool) == 0
        report = up.run_until_confirmed(timeout_s=5.0)
        assert report.pending == () and report.sent_messages == 0 and report.submitted == 0


@pytest.mark.integration
def test_resend_when_unconfirmed(broker: str, tmp_path: Path) -> None:
    (ep,) = _episodes(seed=920_003, count=1)
    n = len(encode_episode(ep))
    cfg = UploaderConfig(broker, tmp_path / "spool", resend_after_s=0.0)
    with Uploader(cfg) as up:
        up.submit(ep)
        assert up.send_pending() == n
        assert up.send_pending() == n  # unconfirmed and resend_after_s=0: sent again
        entry = up.spool.get(ep.episode_id)
        assert entry is not None and entry.attempts == 2
        values = read_raw(broker, [ep.episode_id])
        assert len(values[ep.episode_id]) >= 2 * n  # both copies are on the topic
        asm = EpisodeAssembler(ep.episode_id)
        for v in values[ep.episode_id]:
            asm.add(decode_chunk(v))
        assert asm.duplicate_count >= n  # byte-identical re-send: harmless duplicates
        assert_same_episode(asm.assemble(), ep)

        publish(broker, [ack(ep.episode_id)])
        report = up.run_until_confirmed(timeout_s=WAIT_S)
    assert report.committed == (ep.episode_id,)
    assert report.pending == () and report.quarantined == ()
    assert report.submitted == 1
    assert report.resent_episodes >= 1  # the loop kept re-sending until the ack came


@pytest.mark.integration
def test_upload_paths_and_restart(broker: str, tmp_path: Path) -> None:
    sim = dataclasses.replace(TINY, seed=920_004, duration_s=0.5, cameras=("cam_high",))
    paths = write_fleet(sim, tmp_path / "bundles", progress=False)
    ids = [p.name.removesuffix(".piep") for p in paths]
    cfg = UploaderConfig(broker, tmp_path / "spool")
    report = upload_paths([tmp_path / "bundles"], cfg, wait_s=None, progress=False)
    assert report.submitted == 2 and report.unsent == ()
    assert report.sent_messages == sum(len(read_bundle(p)) for p in paths)
    assert sorted(report.pending) == sorted(ids)  # sent, not yet confirmed
    read_raw(broker, ids)

    publish(broker, [ack(i) for i in ids])
    # A new process: it finds the spool, does not re-send (sent recently), reads acks from the start.
    report = upload_paths([paths[0]], cfg, wait_s=WAIT_S, progress=False)
    assert report.pending == ()
    assert sorted(report.committed) == sorted(ids)
    assert report.sent_messages == 0


@pytest.mark.integration
def test_broker_down_leaves_episode_spooled(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (ep,) = _episodes(seed=920_005, count=1)
    cfg = UploaderConfig(
        f"127.0.0.1:{port}",
        tmp_path / "spool",
        delivery_timeout_s=1.0,
        backoff_initial_s=0.1,
        backoff_max_s=0.2,
        send_rounds=2,
    )
    with Uploader(cfg) as up:
        up.submit(ep)
        assert up.send_pending() == 0
        entry = up.spool.get(ep.episode_id)
        assert entry is not None and entry.attempts == 0 and entry.last_sent_ns is None
        report = up.run_until_confirmed(timeout_s=1.0)
    assert report.pending == (ep.episode_id,) and report.unsent == (ep.episode_id,)


@pytest.fixture
def own_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """A broker of this test's own, so it can be restarted without disturbing the session's."""
    import socket

    from pi_jobs.local.stack import ensure_topics, start_broker, stop_broker
    from pi_jobs.settings import Settings

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    settings = Settings(
        home=tmp_path_factory.mktemp("own-broker"), broker_port=port, bootstrap_servers=f"127.0.0.1:{port}"
    )
    start_broker(settings)
    ensure_topics(settings.bootstrap_servers)
    try:
        yield settings
    finally:
        stop_broker(settings)


@pytest.mark.integration
def test_broker_restart_recreates_producer(own_broker: object, tmp_path: Path) -> None:
    from pi_jobs.local.stack import ensure_topics, start_broker, stop_broker

    settings = own_broker
    bootstrap = settings.bootstrap_servers  # type: ignore[attr-defined]
    eps = _episodes(seed=920_006)
    cfg = UploaderConfig(
        bootstrap,
        tmp_path / "spool",
        resend_after_s=0.0,
        delivery_timeout_s=3.0,
        backoff_initial_s=0.1,
        backoff_max_s=0.5,
    )
    with Uploader(cfg) as up:
        up.submit(eps[0])
        assert up.send_pending() == len(encode_episode(eps[0]))
        stop_broker(settings)  # type: ignore[arg-type]
        start_broker(settings)  # type: ignore[arg-type]
        ensure_topics(bootstrap)  # the memory broker lost every topic and record
        restarted_ns = time.time_ns()
        up.submit(eps[1])
        # The old producer id is unknown to the new broker; the uploader must recreate its
        # producer and deliver both episodes (the first again: the restart lost it).
        deadline = time.monotonic() + WAIT_S
        while not all((e.last_sent_ns or 0) > restarted_ns for e in up.spool.entries()):
            assert time.monotonic() < deadline, "uploader did not recover after the broker restart"
            up.send_pending()
    values = read_raw(bootstrap, [e.episode_id for e in eps])
    for e in eps:
        asm = EpisodeAssembler(e.episode_id)
        for v in values[e.episode_id]:
            asm.add(decode_chunk(v))
        assert_same_episode(asm.assemble(), e)
