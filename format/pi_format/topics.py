"""Kafka topic names and the end-to-end acknowledgement message.

`episodes.raw.v1` carries the chunks of wire protocol v1 keyed by episode_id. After the stream
job commits an episode to the lake (or quarantines it), it publishes an `Ack` on
`episodes.ack.v1` keyed by the same episode_id; the uploader drops the episode from its spool
only then.

Robot fleets that must not read each other's acks (a Kafka ACL is per topic, not per key) get an
ack topic each, `episodes.ack.v1.<fleet>` (`fleet_ack_topic`); the stream job picks an ack's topic
from the episode id's prefix (`AckRoutes`), and a fleet's uploader reads only its own topic.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field

from pi_format.episode import check_name

RAW_TOPIC = "episodes.raw.v1"
ACK_TOPIC = "episodes.ack.v1"
# Most fleets one installation routes acks for: the routing is a linear scan per ack, and an
# ACL, a topic and a KafkaUser per fleet are made by hand (deploy/k8s/kafka-users.yaml).
MAX_ACK_ROUTES = 1000
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


def fleet_ack_topic(fleet: str) -> str:
    """The ack topic of one robot fleet: `episodes.ack.v1.<fleet>`; "" is the shared `ACK_TOPIC`.

    Raises:
        ValueError: `fleet` is not a name (SPEC.md §1.1).

    Example:
        >>> fleet_ack_topic("fleet-a")
        'episodes.ack.v1.fleet-a'
    """
    if fleet == "":
        return ACK_TOPIC
    check_name("fleet", fleet)
    return f"{ACK_TOPIC}.{fleet}"


@dataclass(frozen=True, slots=True)
class AckRoutes:
    """Which ack topic an episode's ack goes to: the fleet of the longest episode-id prefix that
    matches, else `default`. Parsed from the `stream.ack_routes` setting, a comma-separated list
    of `<episode_id prefix>=<fleet>` (both names, SPEC.md §1.1), e.g. "sim0-=fleet-a,r7-=fleet-b".

    Routing is by episode id because an ack carries nothing else, and a quarantined episode may
    have no readable meta; by convention (SPEC.md §1.1) an episode id starts with its robot id.

    Example:
        >>> routes = AckRoutes.parse("sim0-=fleet-a,sim0-r9=fleet-b")
        >>> routes.topic_for("sim0-r000-e00001"), routes.topic_for("sim0-r9-e1"), routes.topic_for("x-1")
        ('episodes.ack.v1.fleet-a', 'episodes.ack.v1.fleet-b', 'episodes.ack.v1')
    """

    routes: tuple[tuple[str, str], ...] = ()
    default: str = ACK_TOPIC
    # longest prefix first, so the most specific route wins
    _ordered: tuple[tuple[str, str], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        check_name("default ack topic", self.default)
        if len(self.routes) > MAX_ACK_ROUTES:
            raise ValueError(f"ack routes: at most {MAX_ACK_ROUTES} routes, got {len(self.routes)}")
        seen: dict[str, str] = {}
        for prefix, fleet in self.routes:
            check_name("ack route prefix", prefix)
            fleet_ack_topic(fleet)  # checks the fleet's name
            if fleet == "":
                raise ValueError(f"ack route {prefix!r}: the fleet must be a name, got ''")
            if seen.setdefault(prefix, fleet) != fleet:
                raise ValueError(
                    f"ack routes: prefix {prefix!r} is routed to two fleets ({seen[prefix]!r} and "
                    f"{fleet!r}); give each prefix one fleet"
                )
        ordered = sorted(set(self.routes), key=lambda route: (-len(route[0]), route[0]))
        object.__setattr__(self, "_ordered", tuple(ordered))

    @classmethod
    def parse(cls, text: str, *, default: str = ACK_TOPIC) -> AckRoutes:
        """Routes from "prefix=fleet,prefix=fleet" ("" or spaces: none, every ack to `default`).

        Raises:
            ValueError: an entry is not `prefix=fleet`, or a name is not a name; the message
                names the entry.
        """
        routes = []
        for raw in text.split(","):
            entry = raw.strip()
            if not entry:
                continue
            prefix, sep, fleet = entry.partition("=")
            if not sep:
                raise ValueError(
                    f"ack routes: entry {entry[:200]!r} is not '<episode_id prefix>=<fleet>' "
                    "(e.g. 'sim0-=fleet-a')"
                )
            routes.append((prefix.strip(), fleet.strip()))
        return cls(tuple(routes), default=default)

    def topic_for(self, episode_id: str) -> str:
        """The topic the ack of `episode_id` is published on."""
        for prefix, fleet in self._ordered:
            if episode_id.startswith(prefix):
                return fleet_ack_topic(fleet)
        return self.default

    @property
    def topics(self) -> list[str]:
        """Every topic an ack may go to (the default first), e.g. for creating them."""
        return [self.default, *sorted({fleet_ack_topic(f) for _, f in self.routes} - {self.default})]
