"""Kafka topic names and the Ack message."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pi_format import ACK_TOPIC, RAW_TOPIC, RAW_TOPIC_PARTITIONS, Ack, AckStatus

from tests.strategies import names


def test_topic_names() -> None:
    assert (RAW_TOPIC, ACK_TOPIC, RAW_TOPIC_PARTITIONS) == ("episodes.raw.v1", "episodes.ack.v1", 4)


@settings(max_examples=50, deadline=None)
@given(
    episode_id=names(),
    status=st.sampled_from(list(AckStatus)),
    attempt_id=st.text(max_size=20),
    committed_at_ns=st.integers(-(2**63), 2**63 - 1),
    reason=st.text(max_size=20),
)
def test_ack_round_trip(
    episode_id: str, status: AckStatus, attempt_id: str, committed_at_ns: int, reason: str
) -> None:
    ack = Ack(episode_id, status, attempt_id, committed_at_ns, reason)
    encoded = ack.encode()
    assert Ack.decode(encoded) == ack
    assert encoded == Ack.decode(encoded).encode()  # deterministic
    assert set(json.loads(encoded)) == {"episode_id", "status", "attempt_id", "committed_at_ns", "reason"}


def test_ack_wire_form() -> None:
    ack = Ack("r1-1", AckStatus.QUARANTINED, "a1", 5, "chunk_checksum")
    assert json.loads(ack.encode()) == {
        "episode_id": "r1-1",
        "status": "quarantined",
        "attempt_id": "a1",
        "committed_at_ns": 5,
        "reason": "chunk_checksum",
    }
    doc = b'{"episode_id": "r1-1", "status": "committed", "attempt_id": "a", "committed_at_ns": 1}'
    assert Ack.decode(doc).reason == ""  # reason is optional on the wire


@pytest.mark.parametrize(
    "value",
    [
        b"",
        b"not json",
        b"[]",
        b'{"episode_id": "e"}',
        b'{"episode_id": "e", "status": "lost", "attempt_id": "a", "committed_at_ns": 1}',
        b'{"episode_id": "e", "status": "committed", "attempt_id": "a", "committed_at_ns": "x"}',
        b"\xff\xfe",
    ],
)
def test_ack_bad_input(value: bytes) -> None:
    with pytest.raises(ValueError, match="not an ack message"):
        Ack.decode(value)
