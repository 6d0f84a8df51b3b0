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


# ---- acks per robot fleet (issue 31: a fleet reads only its own acks) ------------------------


def test_fleet_ack_topics_and_routes() -> None:
    from pi_format import AckRoutes, fleet_ack_topic

    assert fleet_ack_topic("fleet-a") == "episodes.ack.v1.fleet-a"
    assert fleet_ack_topic("") == ACK_TOPIC
    routes = AckRoutes.parse(" sim0-=fleet-a , sim0-r9=fleet-b,,r7-=fleet-b ")
    assert routes.topic_for("sim0-r000-e00001") == "episodes.ack.v1.fleet-a"
    assert routes.topic_for("sim0-r9-e1") == "episodes.ack.v1.fleet-b"  # the longest prefix wins
    assert routes.topic_for("r7-000001") == "episodes.ack.v1.fleet-b"
    assert routes.topic_for("sim1-r000-e1") == ACK_TOPIC  # no route: the shared topic
    assert routes.topics == [ACK_TOPIC, "episodes.ack.v1.fleet-a", "episodes.ack.v1.fleet-b"]
    assert AckRoutes.parse("").topic_for("anything") == ACK_TOPIC
    assert AckRoutes.parse("a-=f", default="acks.other").topic_for("b-1") == "acks.other"


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("sim0-", "is not '<episode_id prefix>=<fleet>'"),
        ("sim0-=", "the fleet must be a name"),
        ("=fleet-a", "ack route prefix must be 1-128 chars"),
        ("sim0-=fleet a", "fleet must be 1-128 chars"),
        ("sim0-=../../etc", "fleet must be 1-128 chars"),
        ("sim0-=fleet-a,sim0-=fleet-b", "routed to two fleets"),
        ("p=" + "f" * 129, "fleet must be 1-128 chars"),
        ("x\x00=f", "ack route prefix must be 1-128 chars"),
        (",".join(f"p{i}-=f" for i in range(1001)), "at most 1000 routes"),
    ],
)
def test_bad_ack_routes_are_refused_with_the_entry_named(text: str, match: str) -> None:
    from pi_format import AckRoutes

    with pytest.raises(ValueError, match=match):
        AckRoutes.parse(text)


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=200), episode_id=names())
def test_any_routes_text_parses_to_names_or_is_refused(text: str, episode_id: str) -> None:
    from pi_format import AckRoutes

    try:
        routes = AckRoutes.parse(text)
    except ValueError as err:
        assert "ack route" in str(err) or "fleet" in str(err)
        return
    topic = routes.topic_for(episode_id)  # a route that parsed always names a valid topic
    assert topic == ACK_TOPIC or topic.startswith(ACK_TOPIC + ".")
    assert topic in routes.topics
