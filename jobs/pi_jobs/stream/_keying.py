"""Keying the stream job's records by episode in the JVM, not in a Python operator.

PyFlink's `DataStream.key_by(python_function)` adds a Python operator in front of the keyed
one: every Kafka record (chunks of up to 512 KiB) crossed JVM -> Python (for the key) ->
JVM -> Python (the sink), so its bytes were serialised through the Beam data channel twice
(issue 35 item 2: `benchmarks/ingest/PROFILE.md`, third pass). Here the key is a SQL
expression over the source table, and the keyed stream is built with the same Java key
selector PyFlink's own `key_by` uses (`KeyByKeySelector` on field 0 of a `Row(key, record)`),
so the sink's Python operator receives exactly what it did (`Row(key, Row(k, v, kpartition,
koffset, ktimestamp))`), under the same key type (`ROW<STRING>`: keyed state in a savepoint
maps back), and nothing else runs in Python.

The key equals `pi_jobs.stream._records.episode_key` of the record, byte for byte: the Kafka key
as UTF-8 text, or NO_KEY when it is null, empty, not valid UTF-8 (Java's decoder replaces a
malformed sequence, so a key that does not survive decode + encode unchanged is malformed), or
NO_KEY itself. `tests/jobs/test_stream_keying.py` runs the expression through Flink on seeded and
worst-case keys against `episode_key`; the sink checks it again per record (`key_matches`).
"""

from __future__ import annotations

from typing import Any

from pi_jobs.stream._records import NO_KEY, episode_key

# the source table's columns, in the order the sink reads them (value[0..4])
RECORD_COLUMNS = ("k", "v", "kpartition", "koffset", "ktimestamp")


def key_sql(column: str = "k") -> str:
    """The SQL expression of a record's episode key from its Kafka key column (BYTES).

    Example:
        >>> "DECODE(`k`, 'UTF-8')" in key_sql()
        True
    """
    c = f"`{column}`"
    text = f"DECODE({c}, 'UTF-8')"
    no_key = "'" + NO_KEY.replace("'", "''") + "'"
    return (
        f"CASE WHEN {c} IS NULL OR CHAR_LENGTH({text}) = 0 "
        f"OR ENCODE({text}, 'UTF-8') <> {c} THEN {no_key} ELSE {text} END"
    )


def keyed_source_sql(table: str) -> str:
    """The query whose rows are `(key, ROW(record columns))`: what PyFlink's keyed operators
    expect on their input (the key at field 0, the user's record at field 1)."""
    columns = ", ".join(f"`{c}`" for c in RECORD_COLUMNS)
    return f"SELECT {key_sql()} AS `ekey`, ROW({columns}) AS `rec` FROM `{table}`"


def key_by_in_jvm(t_env: Any, table: str) -> Any:
    """The source `table` as a PyFlink KeyedStream keyed by episode, keyed in the JVM.

    Example:
        >>> key_by_in_jvm(t_env, "pilake_raw").process(EpisodeSinkFunction(settings))
    """
    from pyflink.common import Types
    from pyflink.datastream.data_stream import KeyedStream
    from pyflink.java_gateway import get_gateway

    # a RowTypeInfo stream (not to_data_stream's ExternalTypeInfo): PyFlink's keyed operators
    # take their input type as a RowTypeInfo
    record = Types.ROW(
        [
            Types.PRIMITIVE_ARRAY(Types.BYTE()),  # k
            Types.PRIMITIVE_ARRAY(Types.BYTE()),  # v
            Types.INT(),  # kpartition
            Types.LONG(),  # koffset
            Types.INSTANT(),  # ktimestamp
        ]
    )
    stream = t_env.to_append_stream(
        t_env.sql_query(keyed_source_sql(table)), Types.ROW([Types.STRING(), record])
    )
    j_keyed = stream._j_data_stream.keyBy(
        get_gateway().jvm.KeyByKeySelector(), Types.ROW([Types.STRING()]).get_java_type_info()
    )
    return KeyedStream(j_keyed, record, stream)


def key_matches(key: Any, record: Any) -> bool:
    """Whether the JVM's key of `record` is the one `episode_key` gives (the sink's per-record
    check of the SQL expression: a mismatch is quarantined, never committed under it)."""
    return bool(key == episode_key(record))
