"""pi_ingest._bounded: a client's end is waited for at most close_timeout_s, and stuck ends are capped.

No broker here: the "clients" are plain objects whose end waits on an Event the test releases at
the end (the abandoned-thread set is process-wide, so every test lets its threads finish).
The real librdkafka clients under a starved broker are in test_uploader_liveness.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pi_ingest import UploaderConfig
from pi_ingest._acks import AckListener
from pi_ingest._bounded import MAX_ABANDONED, end_client, too_many_abandoned
from pi_ingest._kafka_log import KafkaLog
from pi_ingest._metrics import KAFKA_STALLS, SEND_FAILURES
from pi_ingest._producer import EpisodeProducer
from pi_ingest.spool import Spool


@pytest.fixture
def release() -> Iterator[threading.Event]:
    """Set at teardown: every parked 'client end' returns, so no abandoned thread outlives the test."""
    event = threading.Event()
    yield event
    event.set()
    deadline = time.monotonic() + 10.0
    while too_many_abandoned() and time.monotonic() < deadline:
        time.sleep(0.01)


def test_end_client_returns_and_drops_the_last_reference() -> None:
    ended: list[str] = []
    assert end_client(["client"], ended.append, call="producer_destroy", timeout_s=5.0)
    assert ended == ["client"]


def test_no_client_is_nothing_to_end() -> None:
    ended: list[object] = []
    assert end_client([None], ended.append, call="consumer_close", timeout_s=5.0)
    assert ended == []


def test_the_callers_detach_leaves_the_last_reference_to_the_thread() -> None:
    """`box, owner.client = [owner.client], None` (the producer's and ack consumer's close):
    the client's deallocation, librdkafka's rd_kafka_destroy, runs on the ending thread."""
    freed_on: list[str] = []

    class Client:
        def __del__(self) -> None:
            freed_on.append(threading.current_thread().name)

    class Owner:
        client: Client | None = None

    owner = Owner()
    owner.client = Client()
    box, owner.client = [owner.client], None
    assert end_client(box, lambda _c: None, call="producer_destroy", timeout_s=5.0)
    assert freed_on == ["pi-ingest-producer_destroy"]
    assert box == []


def test_the_uploaders_clients_end_within_the_timeout_and_none_is_no_stall(tmp_path: Path) -> None:
    """EpisodeProducer.drop and AckListener.close, with a real librdkafka producer (no broker
    at 127.0.0.1:9: it never connected) and with no client made yet."""
    config = UploaderConfig("127.0.0.1:9", tmp_path / "spool", close_timeout_s=10.0)
    stalls = KAFKA_STALLS.labels("producer_destroy")._value.get()
    producer = EpisodeProducer(config, KafkaLog())
    producer._get_producer()
    producer.drop()
    assert producer._producer is None
    producer.drop()  # none left: nothing to end
    listener = AckListener(config, Spool(tmp_path / "spool"), KafkaLog())
    listener.close()
    assert listener._consumer is None
    assert KAFKA_STALLS.labels("producer_destroy")._value.get() == stalls


def test_end_client_errors_are_swallowed() -> None:
    def refuse(_client: object) -> None:
        raise RuntimeError("fatal producer refuses purge")

    assert end_client([object()], refuse, call="producer_destroy", timeout_s=5.0)


def test_a_stuck_end_is_abandoned_and_counted(release: threading.Event) -> None:
    before = KAFKA_STALLS.labels("consumer_close")._value.get()
    box = [object()]
    assert not end_client(box, lambda _c: release.wait(), call="consumer_close", timeout_s=0.05)
    assert box == [], "the thread holds the client, not the caller"
    assert KAFKA_STALLS.labels("consumer_close")._value.get() == before + 1


def test_stuck_ends_are_capped_and_no_new_producer_is_built(release: threading.Event, tmp_path: Path) -> None:
    for _ in range(MAX_ABANDONED):
        end_client([object()], lambda _c: release.wait(), call="producer_destroy", timeout_s=0.01)
    assert too_many_abandoned()
    config = UploaderConfig("127.0.0.1:9", tmp_path / "spool")
    producer = EpisodeProducer(config, KafkaLog())
    failures = SEND_FAILURES._value.get()
    assert producer.deliver("sim0-r000-e00000", [b"chunk"], deadline=None) is False
    assert producer._producer is None, "no client is built while earlier ones are stuck"
    assert SEND_FAILURES._value.get() == failures  # counted by the Uploader, per episode
    release.set()
    deadline = time.monotonic() + 10.0
    while too_many_abandoned():
        assert time.monotonic() < deadline, "released ends must leave the abandoned set"
        time.sleep(0.01)


@pytest.mark.parametrize("value", [0.0, -1.0, float("nan"), float("inf")])
def test_close_timeout_validation(tmp_path: Path, value: float) -> None:
    with pytest.raises(ValueError, match="close_timeout_s must be a finite number > 0"):
        UploaderConfig("127.0.0.1:9", tmp_path, close_timeout_s=value)
