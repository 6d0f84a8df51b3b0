"""A seeded generator of hostile Kafka messages for the stream job (the wire fuzz test and the
attack benchmark share it): mutations of real episodes' messages, interleaved with valid ones.

Each `FuzzCase` is one mutated episode (or one burst of garbage) under its own Kafka key, with
what the job must do with it: `commit` (a harmless mutation: duplicates, reordering, the
manifest first), `quarantine` (with one of `reasons` when given), or `either` (a conflicting
chunk: the first copy to arrive wins, so the episode commits once or is quarantined). The two
cases that once stopped the job are in every plan: `killer_manifest` (a 167-byte manifest with
chunk_index 0xFFFFFFFE, chunk_count 0xFFFFFFFF) and `killer_count` (ten chunks declaring
chunk_count 0xFFFFFFFF).

Example:
    >>> plan = fuzz_plan(7, cases=40, donors=episodes[:2], valid=episodes[2:])
    >>> len(plan.messages) > 40, sorted({c.mutation for c in plan.cases})[:3]
    (True, ['bad_manifest_json', 'bitflip', 'conflict'])
"""

from __future__ import annotations

import dataclasses
import json
import random
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

# (key, value, partition or None); a None key is a keyless record, a None value a tombstone
Message = tuple[bytes | None, bytes | None, int | None]
# chunk payload size of the generated episodes: small, so an episode has several chunks to mutate
FUZZ_PAYLOAD_BYTES = 16 * 1024
U32_MAX = 0xFFFFFFFF


@dataclass(frozen=True, slots=True)
class FuzzCase:
    """One mutation: its messages went out under `key`; `expect` says what the job must do."""

    mutation: str
    key: str | None  # the Kafka key (the counting key of its quarantine rows); None: keyless
    expect: str  # "commit", "quarantine" or "either"
    messages: int
    reasons: frozenset[str] = frozenset()  # when set, the quarantine reasons allowed


@dataclass(slots=True)
class FuzzPlan:
    """Every message to send, in order, and what each case and valid episode must become."""

    seed: int
    messages: list[Message] = field(default_factory=list)
    cases: list[FuzzCase] = field(default_factory=list)
    valid: dict[str, list[bytes]] = field(default_factory=dict)  # episode_id -> its messages

    @property
    def bytes(self) -> int:
        return sum(len(v or b"") + len(k or b"") for k, v, _ in self.messages)


def _renamed(episode: Any, episode_id: str) -> Any:
    return dataclasses.replace(episode, meta=dataclasses.replace(episode.meta, episode_id=episode_id))


def encode_fuzz(episode: Any) -> list[bytes]:
    """The messages of `episode` as the fuzz plans chunk it (FUZZ_PAYLOAD_BYTES per chunk)."""
    from pi_format.wire import encode_episode

    return encode_episode(episode, payload_bytes=FUZZ_PAYLOAD_BYTES)


def _header(message: bytes) -> list[Any]:
    from pi_format.wire._header import HEADER

    return list(HEADER.unpack_from(message))


def _with_header(message: bytes, **fields: int) -> bytes:
    """`message` with header fields replaced (names as in SPEC 3.1); the CRC is left alone."""
    from pi_format.wire._header import HEADER, HEADER_SIZE

    names = ["magic", "version", "kind", "flags", "chunk_index", "chunk_count", "crc", "id_len", "stream_len"]
    values = _header(message)
    for name, value in fields.items():
        values[names.index(name)] = value
    return HEADER.pack(*values) + message[HEADER_SIZE:]


def _raw_chunk(eid: str, kind: int, index: int, count: int, stream: str, payload: bytes) -> bytes:
    """A chunk with a valid CRC and any header values (encode_chunk refuses some of these)."""
    from pi_format.wire._header import HEADER, MAGIC

    e, s = eid.encode(), stream.encode()
    return HEADER.pack(MAGIC, 1, kind, 0, index, count, zlib.crc32(payload), len(e), len(s)) + e + s + payload


class _Builder:
    """Makes the cases of one plan (a method per mutation class)."""

    def __init__(self, rng: random.Random, donors: Sequence[Any], limits: Any) -> None:
        self.rng = rng
        self.donors = donors
        self.limits = limits
        self.n = 0

    def fresh(self, mutation: str) -> tuple[str, list[bytes]]:
        """A new episode id and the encoded messages of a donor episode under it."""
        self.n += 1
        eid = f"fuzz-{self.rng.randrange(16**6):06x}-{self.n:05d}-{mutation}"[:100]
        return eid, encode_fuzz(_renamed(self.rng.choice(self.donors), eid))

    # -- each returns (messages, expect, reasons) for a fresh key ------------------------------
    def bitflip(self, msgs: list[bytes]) -> tuple[list[bytes], str, frozenset[str]]:
        i = self.rng.randrange(len(msgs))
        out = bytearray(msgs[i])
        bit = self.rng.randrange(len(out) * 8)
        out[bit // 8] ^= 1 << (bit % 8)
        return [*msgs[:i], bytes(out), *msgs[i + 1 :]], "quarantine", frozenset()

    def truncate(self, msgs: list[bytes]) -> tuple[list[bytes], str, frozenset[str]]:
        i = self.rng.randrange(len(msgs))
        cut = msgs[i][: self.rng.randrange(len(msgs[i]))]
        return [*msgs[:i], cut, *msgs[i + 1 :]], "quarantine", frozenset()

    def duplicate(self, msgs: list[bytes]) -> tuple[list[bytes], str, frozenset[str]]:
        extra = [self.rng.choice(msgs) for _ in range(self.rng.randint(1, 3))]
        out = [*msgs[:-1], *extra, msgs[-1]]
        return out, "commit", frozenset()

    def reorder(self, msgs: list[bytes]) -> tuple[list[bytes], str, frozenset[str]]:
        out = list(msgs)
        self.rng.shuffle(out)
        return out, "commit", frozenset()

    def manifest_first(self, msgs: list[bytes]) -> tuple[list[bytes], str, frozenset[str]]:
        return [msgs[-1], *msgs[:-1]], "commit", frozenset()

    def conflict(self, msgs: list[bytes]) -> tuple[list[bytes], str, frozenset[str]]:
        from pi_format.wire import decode_chunk

        i = self.rng.randrange(len(msgs) - 1)
        c = decode_chunk(msgs[i])
        forged = bytearray(c.payload) or bytearray(b"\x00")
        forged[self.rng.randrange(len(forged))] ^= 0xFF
        other = _raw_chunk(c.episode_id, 1, c.chunk_index, c.chunk_count, c.stream, bytes(forged))
        pair = [other, msgs[i]] if self.rng.random() < 0.5 else [msgs[i], other]
        return [*msgs[:i], *pair, *msgs[i + 1 :]], "either", frozenset()

    def version(self, msgs: list[bytes]) -> tuple[list[bytes], str, frozenset[str]]:
        v = self.rng.choice([0, 2, 256, 65535])
        return [_with_header(m, version=v) for m in msgs], "quarantine", frozenset({"unsupported_version"})

    def huge_lengths(self, msgs: list[bytes]) -> tuple[list[bytes], str, frozenset[str]]:
        i = self.rng.randrange(len(msgs))
        field_name = self.rng.choice(["id_len", "stream_len"])
        return (
            [*msgs[:i], _with_header(msgs[i], **{field_name: 0xFFFF}), *msgs[i + 1 :]],
            "quarantine",
            frozenset(),
        )

    def count_mismatch(self, msgs: list[bytes]) -> tuple[list[bytes], str, frozenset[str]]:
        from pi_format.wire import decode_chunk

        i = self.rng.randrange(len(msgs) - 1)
        c = decode_chunk(msgs[i])
        odd = _raw_chunk(c.episode_id, 1, c.chunk_index, c.chunk_count + 5, c.stream, c.payload)
        return [*msgs[:i], odd, *msgs[i + 1 :]], "quarantine", frozenset()

    def bad_manifest_json(self, msgs: list[bytes]) -> tuple[list[bytes], str, frozenset[str]]:
        h = _header(msgs[-1])
        eid = msgs[-1][24 : 24 + h[7]].decode()
        junk = self.rng.choice([b"{", b"[]", b'{"streams": 5}', b"\xff\xfe", json.dumps({"x": 1}).encode()])
        last = _raw_chunk(eid, 2, h[4], h[5], "manifest", junk)
        return [*msgs[:-1], last], "quarantine", frozenset({"bad_metadata", "count_mismatch"})

    def manifest_span(self, msgs: list[bytes]) -> tuple[list[bytes], str, frozenset[str]]:
        """A manifest (valid CRC) whose stream spans far more chunks than exist."""
        h = _header(msgs[-1])
        eid = msgs[-1][24 : 24 + h[7]].decode()
        doc = json.loads(msgs[-1][24 + h[7] + h[8] :])
        doc["streams"][0]["chunk_count"] = self.rng.choice([2**31, 2**40, U32_MAX])
        payload = json.dumps(doc, sort_keys=True).encode()
        return [*msgs[:-1], _raw_chunk(eid, 2, h[4], h[5], "manifest", payload)], "quarantine", frozenset()

    def mismatched_key(self, msgs: list[bytes]) -> tuple[list[bytes], str, frozenset[str]]:
        return msgs, "quarantine", frozenset({"key_mismatch"})  # sent under another key (see plan)

    def oversize(self, msgs: list[bytes]) -> tuple[list[bytes], str, frozenset[str]]:
        size = self.rng.randint(1_000_001, 2_000_000)
        return [msgs[0] + bytes(size - len(msgs[0]))], "quarantine", frozenset({"oversize"})

    def empty_value(self, msgs: list[bytes]) -> tuple[list[bytes], str, frozenset[str]]:
        return [b""], "quarantine", frozenset({"truncated"})

    def killer_manifest(self, eid: str) -> tuple[list[bytes], str, frozenset[str]]:
        """The 167-byte message of issue 31: chunk_index 0xFFFFFFFE, chunk_count 0xFFFFFFFF."""
        payload = json.dumps({"chunk_count": U32_MAX, "episode_id": eid, "streams": []}).encode()
        msg = _raw_chunk(eid, 2, U32_MAX - 1, U32_MAX, "manifest", payload)
        return [msg], "quarantine", frozenset({"limit_exceeded"})

    def killer_count(self, msgs: list[bytes]) -> tuple[list[bytes], str, frozenset[str]]:
        """Ten valid-CRC data chunks declaring chunk_count 0xFFFFFFFF."""
        from pi_format.wire import decode_chunk

        out = []
        for i, m in enumerate((msgs * 10)[:10]):
            c = decode_chunk(m)
            out.append(_raw_chunk(c.episode_id, 1, i, U32_MAX, "proprio", c.payload))
        return out, "quarantine", frozenset({"limit_exceeded"})

    def over_episode_bytes(self, eid: str) -> tuple[list[bytes], str, frozenset[str]]:
        """Data chunks of ~0.9 MB until the episode is past max_episode_bytes (never a manifest)."""
        n = self.limits.max_episode_bytes // 900_000 + 2
        count = min(n + 1, self.limits.max_chunks_per_episode)
        pad = bytes(900_000)
        return (
            [_raw_chunk(eid, 1, i, count, "video", pad) for i in range(min(n, count - 1))],
            "quarantine",
            frozenset({"limit_exceeded", "incomplete_timeout"}),
        )

    def big_partials(self, eid: str) -> list[tuple[str, list[bytes]]]:
        """Several keys, each holding ~3/4 of max_episode_bytes that never completes: together
        past max_held_bytes, so the job must push the longest-idle ones out."""
        per_key = max(1, (self.limits.max_episode_bytes * 3 // 4) // 900_000)
        keys = self.limits.max_held_bytes // (per_key * 900_000) + 2
        pad = bytes(900_000)
        out = []
        for k in range(keys):
            key = f"{eid}-{k}"
            out.append((key, [_raw_chunk(key, 1, i, per_key + 2, "video", pad) for i in range(per_key)]))
        return out


# Mutation classes and their relative weights in a plan.
MUTATIONS: dict[str, int] = {
    "bitflip": 6,
    "truncate": 4,
    "duplicate": 3,
    "reorder": 3,
    "manifest_first": 2,
    "conflict": 3,
    "version": 2,
    "huge_lengths": 2,
    "count_mismatch": 2,
    "bad_manifest_json": 2,
    "manifest_span": 2,
    "mismatched_key": 2,
    "missing_key": 1,
    "tombstone": 1,
    "empty_value": 1,
    "oversize": 1,
    "garbage": 2,
    "killer_manifest": 1,
    "killer_count": 1,
    "over_episode_bytes": 1,
    "big_partials": 0,  # one per plan (ALWAYS): it is large (past max_held_bytes)
    "flood": 0,  # one burst per plan (ALWAYS), of `flood_keys` episodes
}
# Every plan has at least one case of each class (the rest are drawn by weight).
ALWAYS = tuple(MUTATIONS)


def fuzz_plan(
    seed: int,
    *,
    cases: int,
    donors: Sequence[Any],
    valid: Sequence[Any],
    limits: Any = None,
    flood_keys: int = 0,
    partitions: int = 4,
    only: Sequence[str] = (),
) -> FuzzPlan:
    """Messages of `cases` mutations of the `donors` (renamed per case), interleaved with the
    unmodified messages of the `valid` episodes; a pure function of its arguments.

    Args:
        seed: the generator's seed; the same seed gives the same messages.
        cases: how many mutation cases (at least one of each class in `MUTATIONS`).
        donors: real episodes the mutations start from.
        valid: episodes sent intact; each must be committed exactly once.
        limits: the job's `StreamLimits` (sizes the `over_episode_bytes` case); None: defaults.
        flood_keys: one-chunk episodes that never complete, sent in one burst (the `flood`
            class): more than the job's `max_held_episodes` makes it push some out.
        partitions: partitions of the raw topic (flood records go to one of them).
        only: draw from these mutation classes only (default: all of `MUTATIONS`).
    """
    from pi_jobs.stream.limits import StreamLimits

    rng = random.Random(seed)
    b = _Builder(rng, donors, limits or StreamLimits())
    plan = FuzzPlan(seed)
    unknown = sorted(set(only) - set(MUTATIONS))
    if unknown:
        raise ValueError(f"only: unknown mutation classes {unknown}; known: {sorted(MUTATIONS)}")
    always = tuple(only) or ALWAYS
    kinds = list(always[: min(cases, len(always))])
    names = list(only) or list(MUTATIONS)
    weights = [max(MUTATIONS[n], 1) if only else MUTATIONS[n] for n in names]
    kinds += rng.choices(names, weights, k=max(0, cases - len(kinds)))
    rng.shuffle(kinds)
    batches: list[list[Message]] = []
    for kind in kinds:
        batches.append(_case(b, plan, kind, flood_keys, partitions))
    # valid episodes go between the cases, at random places
    for ep in valid:
        msgs = encode_fuzz(ep)
        plan.valid[ep.episode_id] = msgs
        at = rng.randrange(len(batches) + 1)
        batches.insert(at, [(ep.episode_id.encode(), m, None) for m in msgs])
    for batch in batches:
        plan.messages.extend(batch)
    return plan


def _case(b: _Builder, plan: FuzzPlan, kind: str, flood_keys: int, partitions: int) -> list[Message]:
    rng = b.rng
    if kind == "garbage":
        junk = rng.randbytes(rng.randint(24, 400))
        junk = b"XX" + junk[2:] if junk[:4] == b"PIEP" else junk
        plan.cases.append(FuzzCase(kind, None, "quarantine", 1, frozenset({"bad_magic"})))
        return [(None, junk, None)]
    if kind == "flood":
        out: list[Message] = []
        part = rng.randrange(partitions)
        for _ in range(max(flood_keys, 1)):
            eid, msgs = b.fresh(kind)
            out.append((eid.encode(), msgs[0], part))
            plan.cases.append(
                FuzzCase(kind, eid, "quarantine", 1, frozenset({"limit_exceeded", "incomplete_timeout"}))
            )
        return out
    eid, msgs = b.fresh(kind)
    if kind == "big_partials":
        sent: list[Message] = []
        for key, values in b.big_partials(eid):
            why = frozenset({"limit_exceeded", "incomplete_timeout"})
            plan.cases.append(FuzzCase(kind, key, "quarantine", len(values), why))
            sent += [(key.encode(), v, None) for v in values]
        return sent
    if kind == "killer_manifest":
        values, expect, reasons = b.killer_manifest(eid)
    elif kind == "over_episode_bytes":
        values, expect, reasons = b.over_episode_bytes(eid)
    elif kind == "missing_key":
        plan.cases.append(FuzzCase(kind, eid, "quarantine", len(msgs), frozenset({"key_mismatch"})))
        return [(None, m, None) for m in msgs]  # quarantined under the id the chunks name
    elif kind == "tombstone":
        plan.cases.append(FuzzCase(kind, eid, "quarantine", 1, frozenset({"truncated"})))
        return [(eid.encode(), None, None)]
    else:
        values, expect, reasons = getattr(b, kind)(msgs)
    key = eid
    if kind == "mismatched_key":
        key = f"{eid}-other"
    plan.cases.append(FuzzCase(kind, key, expect, len(values), reasons))
    return [(key.encode(), v, None) for v in values]


def case_counts(plan: FuzzPlan) -> dict[str, int]:
    """Cases per mutation class (what a report prints)."""
    counts: dict[str, int] = {}
    for c in plan.cases:
        counts[c.mutation] = counts.get(c.mutation, 0) + 1
    return dict(sorted(counts.items()))


def header_bytes(value: bytes) -> tuple[int, ...]:
    """The header fields of a message as integers (for reports), magic as its int."""
    return struct.unpack(">IHBBIIIHH", value[:24]) if len(value) >= 24 else ()
