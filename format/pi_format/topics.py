"""Kafka topic names and the end-to-end acknowledgement message.

`episodes.raw.v1` carries the chunks of wire protocol v1 keyed by episode_id. After the stream
job commits an episode to the lake (or quarantines it), it publishes an `Ack` on
`episodes.ack.v1` keyed by the same episode_id; the uploader drops the episode from its spool
only then.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass

RAW_TOPIC = "episodes.raw.v1"
ACK_TOPIC = "episodes.ack.v1"
# Partitions of the raw topic: episodes spread by key, chunks of one episode stay in order.
RAW_TOPIC_PARTITIONS = 4


class AckStatus(enum.StrEnum):
    COMMITTED = "committed"  # visible in the lake (also sent again for a duplicate upload)
    QUARANTINED = "quarantined"  # kept in the quarantine table with a reason


@dataclass(frozen=True, slots=True)
class Ack:
    """What the lake says about one episode once it is durable.

    Example:
        >>> Ack.decode(Ack("r1-000001", AckStatus.COMMITTED, "a1b2", 0).encode()).status
        <AckStatus.COMMITTED: 'committed'>
    """

    episode_id: str
    status: AckStatus
    attempt_id: str
    committed_at_ns: int
    reason: str = ""

    def encode(self) -> bytes:
        return json.dumps(
            {
                "episode_id": self.episode_id,
                "status": self.status.value,
                "attempt_id": self.attempt_id,
                "committed_at_ns": self.committed_at_ns,
                "reason": self.reason,
            },
            sort_keys=True,
        ).encode()

    @classmethod
    def decode(cls, value: bytes) -> Ack:
        """Parse an ack; ValueError says what is wrong with it."""
        try:
            doc = json.loads(value)
            return cls(
                episode_id=str(doc["episode_id"]),
                status=AckStatus(doc["status"]),
                attempt_id=str(doc["attempt_id"]),
                committed_at_ns=int(doc["committed_at_ns"]),
                reason=str(doc.get("reason", "")),
            )
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"not an ack message: {value[:80]!r}: {err}") from err
