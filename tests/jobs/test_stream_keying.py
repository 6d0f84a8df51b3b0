"""The stream job keys records in the JVM with a SQL expression (pi_jobs.stream._keying): it must
give the key `episode_key` gives, for every Kafka key, or records would be grouped (and episodes
committed) under another id. Runs the expression through Flink's SQL runtime (a JVM, no broker)
on the worst keys found and on seeded random bytes, against the Python function."""

from __future__ import annotations

import random
from typing import Any

from pi_jobs.stream._keying import key_matches, key_sql
from pi_jobs.stream._records import NO_KEY, episode_key

WORST: list[bytes | None] = [
    None,
    b"",
    b"r1-000001",
    NO_KEY.encode(),
    b"\x00",  # NUL is valid UTF-8
    b"\xff",  # never valid
    b"\xc3",  # truncated 2-byte sequence
    b"ok\xc3",  # truncated at the end
    b"\xc0\xaf",  # overlong "/"
    b"\xe0\x80\xaf",  # overlong, 3 bytes
    b"\xed\xa0\x80",  # a UTF-16 surrogate encoded in UTF-8 (CESU)
    b"\xf4\x90\x80\x80",  # beyond U+10FFFF
    "\ufffd".encode(),  # a real replacement character: valid
    "é🤖 episode".encode(),
    b"a\x80b",  # a lone continuation byte
    b"'; DROP TABLE x; --",
    b"'" * 3,
]


def _seeded(count: int, seed: int = 35) -> list[bytes]:
    rng = random.Random(seed)
    keys = []
    for _ in range(count):
        n = rng.randint(1, 12)
        if rng.random() < 0.5:  # random bytes: mostly invalid UTF-8
            keys.append(bytes(rng.randrange(256) for _ in range(n)))
        else:  # valid text with multibyte characters, sometimes cut mid-character
            points = [rng.choice([rng.randrange(32, 127), rng.randrange(0x80, 0x2FFF)]) for _ in range(n)]
            text = "".join(map(chr, points))
            data = text.encode()
            keys.append(data[: rng.randint(1, len(data))] if rng.random() < 0.3 else data)
    return keys


def _jvm_keys(keys: list[bytes | None]) -> list[Any]:
    from pyflink.table import DataTypes, EnvironmentSettings, TableEnvironment

    t_env = TableEnvironment.create(EnvironmentSettings.in_batch_mode())
    t_env.get_config().set("parallelism.default", "1")
    rows = [(i, k) for i, k in enumerate(keys)]
    schema = DataTypes.ROW([DataTypes.FIELD("i", DataTypes.INT()), DataTypes.FIELD("k", DataTypes.BYTES())])
    t_env.create_temporary_view("keys", t_env.from_elements(rows, schema, verify_schema=False))
    with t_env.sql_query(f"SELECT i, {key_sql('k')} FROM `keys`").execute().collect() as results:
        found = {int(r[0]): r[1] for r in results}
    return [found[i] for i in range(len(keys))]


def test_the_jvm_key_is_episode_key_for_worst_and_seeded_keys() -> None:
    keys = WORST + _seeded(400)
    jvm = _jvm_keys(keys)
    wrong = [(k, j, episode_key((k,))) for k, j in zip(keys, jvm, strict=True) if j != episode_key((k,))]
    assert not wrong, wrong[:10]
    # the seeded keys exercise both sides: some are keys, some are NO_KEY
    assert sum(j == NO_KEY for j in jvm) > 50 and sum(j != NO_KEY for j in jvm) > 50


def test_the_sink_refuses_a_key_episode_key_disagrees_with() -> None:
    assert key_matches("r1-000001", (b"r1-000001", b"payload"))
    assert key_matches(NO_KEY, (b"\xff", b"payload"))
    assert not key_matches("r1-000001", (b"r1-000002", b"payload"))
    assert not key_matches("\ufffd", (b"\xff", b"payload"))  # a replaced byte is not a key
