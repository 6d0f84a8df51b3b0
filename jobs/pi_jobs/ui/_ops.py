"""The operator pages' reads: the quarantine (rows, their raw messages, the release command)
through pi_jobs.ops.quarantine, and dataset pins with their integrity as
pi_jobs.maintenance.datasets checks it. Read-only.
"""

from __future__ import annotations

import hashlib
import shlex
from dataclasses import dataclass
from functools import partial
from typing import Any

import pyarrow as pa
from pi_format import LakeLayout
from pi_format.lake import PinStore

from pi_jobs.ops import _file_index
from pi_jobs.ui import _page_cache
from pi_jobs.ui._reads import iso

# Raw messages previewed per quarantine row, and bytes of each shown.
_RAW_PREVIEW_MESSAGES = 3
_RAW_PREVIEW_BYTES = 48


@dataclass(frozen=True, slots=True)
class QuarantineRow:
    """One quarantine row as the page shows it."""

    quarantine_id: str
    episode_id: str | None
    status: str
    reason: str
    details: str
    where: str
    size_bytes: int
    quarantined_at: str
    preview: tuple[dict[str, str], ...]
    command: str


def _raw_rows(layout: LakeLayout, attempt_ids: set[str]) -> pa.Table | None:
    """The raw rows of `attempt_ids` (None when the lake has no raw table), read in two passes
    per file: the attempt ids of every row, then only the row groups holding a wanted one. The
    raw table holds every message the stream job received (~11 per episode, 1.1 million rows at 100,000
    episodes of this lake's benchmark) and attempt ids are uuids, so neither file nor row-group
    statistics narrow a filter on them: a filtered scan read the message bytes of the whole
    table (1.5 s at 4,000 episodes); this reads ~40 bytes a message plus the matching row groups,
    the ids once per data file (`pi_jobs.ops._file_index`: 0.9 s a page at 100,000 episodes)."""
    import pyarrow.compute as pc
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    from pi_jobs.ui._reads import parquet_file

    try:
        table = DeltaTable(layout.raw)
    except TableNotFoundError:
        return None
    wanted = pa.array(sorted(attempt_ids), pa.string())
    columns = ["attempt_id", "kafka_topic", "kafka_partition", "kafka_offset", "message"]
    parts = []
    paths = pa.table(table.get_add_actions(flatten=True)).column("path").to_pylist()
    _file_index.forget(layout.raw, paths)
    for path in paths:  # a file's ids read once (_file_index)
        opener = partial(parquet_file, layout.raw, path)
        groups, _ = _file_index.row_groups(layout.raw, path, "attempt_id", attempt_ids, opener)
        if not groups:
            continue
        rows = opener().read_row_groups(groups, columns=columns)
        parts.append(rows.filter(pc.is_in(rows.column("attempt_id"), value_set=wanted)))
    return pa.concat_tables(parts) if parts else None


def _previews(layout: LakeLayout, entries: list[Any]) -> dict[str, tuple[dict[str, str], ...]]:
    """The first raw messages of each entry (what `pilake quarantine show` prints), read in one
    pass over the raw table for the whole page (`_raw_rows`; one scan per row cost ~20 ms each)."""
    import pyarrow.compute as pc

    if not entries:
        return {}
    try:
        rows = _raw_rows(layout, {e.attempt_id for e in entries})
    except Exception as err:  # a raw table GC'd or unreadable: say so on the page, do not fail it
        unreadable = (
            {"where": "-", "size": "-", "sha256": "-", "hex": f"raw rows unreadable: {err}", "text": ""},
        )
        return {e.quarantine_id: unreadable for e in entries}
    out: dict[str, tuple[dict[str, str], ...]] = {}
    for e in entries:
        mine = (
            pa.table({"x": []})
            if rows is None
            else rows.filter(
                (pc.field("attempt_id") == e.attempt_id)
                & (pc.field("kafka_topic") == e.kafka_topic)
                & (pc.field("kafka_partition") == e.kafka_partition)
                & pc.field("kafka_offset").isin(list(e.kafka_offsets))
            )
        )
        if mine.num_rows:
            mine = mine.sort_by("kafka_offset").slice(0, _RAW_PREVIEW_MESSAGES)
        previews = []
        for r in mine.to_pylist():
            message = bytes(r["message"])
            head = message[:_RAW_PREVIEW_BYTES]
            previews.append(
                {
                    "where": f"{r['kafka_topic']}/{r['kafka_partition']}@{r['kafka_offset']}",
                    "size": str(len(message)),
                    "sha256": hashlib.sha256(message).hexdigest()[:16],
                    "hex": head.hex(" "),
                    "text": "".join(chr(b) if 32 <= b < 127 else "." for b in head),
                }
            )
        out[e.quarantine_id] = tuple(previews)
    return out


def quarantine_page(
    layout: LakeLayout, *, page: int, page_size: int, include_closed: bool
) -> tuple[list[QuarantineRow], int]:
    """One page of the quarantine (newest first) with raw previews, and the row count."""
    entries = _page_cache.quarantine_list(layout, include_closed=include_closed)[::-1]
    shown = entries[page * page_size : (page + 1) * page_size]
    previews = _previews(layout, shown)
    out = []
    for e in shown:
        offsets = e.kafka_offsets
        where = f"{e.kafka_topic}/{e.kafka_partition}:{offsets[0] if offsets else '-'}"
        where += f"..{offsets[-1]}" if len(offsets) > 1 else ""
        if e.episode_id is None:
            command = f"pilake quarantine show {shlex.quote(e.quarantine_id)} --dump quarantined.piep"
        else:
            command = f"pilake quarantine release {shlex.quote(e.episode_id)} --note 'why it is fixed'"
        out.append(
            QuarantineRow(
                e.quarantine_id,
                e.episode_id,
                e.status,
                e.reason,
                e.details,
                where,
                e.size_bytes,
                iso(e.quarantined_at_ns),
                previews[e.quarantine_id],
                command,
            )
        )
    return out, len(entries)


@dataclass(frozen=True, slots=True)
class PinRow:
    """One pin with its integrity, as `pilake dataset show` computes it."""

    name: str
    sql: str
    episodes: int
    content_hash: str
    created_at: str
    table_versions: str
    rows_present: int
    intact: bool
    first_episodes: tuple[str, ...]


def _plain(strings: pa.Array) -> bool:
    """Whether every value of a string array is one json.dumps writes as itself between quotes
    (ensure_ascii, no escapes): bytes 0x20-0x7e but `"` and `\\`; checked on the data buffer."""
    import numpy as np

    strings = strings.cast(pa.string())
    if len(strings) == 0:
        return True
    _, offsets, data = strings.buffers()
    bounds = np.frombuffer(offsets, np.int32, len(strings) + 1, strings.offset * 4)
    if data is None:  # only empty strings
        return True
    text = np.frombuffer(data, np.uint8)[int(bounds[0]) : int(bounds[-1])]
    return bool(((text >= 0x20) & (text <= 0x7E) & (text != 0x22) & (text != 0x5C)).all())


def _json_text(values: pa.Array) -> pa.Array | None:
    """Each value as `json.dumps` writes it, vectorised; None when one needs what only
    json.dumps does right (an escape, a null, a type other than string, integer, bool and
    list of strings)."""
    import pyarrow.compute as pc

    kind = values.type
    if values.null_count:
        return None
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        if not _plain(values):
            return None
        return pc.binary_join_element_wise('"', values, '"', "")
    if pa.types.is_integer(kind):
        return pc.cast(values, pa.string())
    if pa.types.is_boolean(kind):
        return pc.if_else(values, "true", "false")
    if pa.types.is_list(kind) and pa.types.is_string(kind.value_type):
        items = pc.list_flatten(values)
        if items.null_count or not _plain(items):
            return None
        joined = pc.binary_join(values, '","')
        empty = pc.equal(pc.list_value_length(values), 0)
        return pc.if_else(empty, "[]", pc.binary_join_element_wise('["', joined, '"]', ""))
    return None


def fast_content_hash(rows: pa.Table) -> str:
    """`pi_format.lake.content_hash(rows)`, the same digest of the same bytes (one JSON line
    per row, `json.dumps([...], separators=(",", ":"))`), with the lines built by Arrow instead
    of a json.dumps per row (~9 us a row: 3 s for the pins of a 100,000-episode lake). Rows with
    anything json.dumps would escape, or nulls, go to `content_hash` itself; tested equal."""
    import hashlib

    import numpy as np
    import pyarrow.compute as pc
    from pi_format.lake import content_hash
    from pi_format.lake.pins import HASH_COLUMNS

    if any(c not in rows.column_names for c in HASH_COLUMNS):
        return content_hash(rows)  # its error names the columns
    ordered = rows.select(list(HASH_COLUMNS)).sort_by(
        [("episode_id", "ascending"), ("attempt_id", "ascending")]
    )
    texts = []
    for name in HASH_COLUMNS:
        text = _json_text(ordered.column(name).combine_chunks())
        if text is None:
            return content_hash(rows)
        texts.append(text)
    lines = pc.binary_join_element_wise("[", *_interleave(texts, ","), "]\n", "")
    digest = hashlib.sha256()
    for chunk in lines.chunks if isinstance(lines, pa.ChunkedArray) else [lines]:
        if len(chunk):  # the lines are contiguous in the string array's data buffer
            _, offsets, data = chunk.buffers()
            bounds = np.frombuffer(offsets, np.int32, len(chunk) + 1, chunk.offset * 4)
            digest.update(memoryview(data)[int(bounds[0]) : int(bounds[-1])])
    return digest.hexdigest()


def _interleave(texts: list[pa.Array], separator: str) -> list[Any]:
    out: list[Any] = []
    for k, text in enumerate(texts):
        if k:
            out.append(separator)
        out.append(text)
    return out


@dataclass(frozen=True, slots=True)
class PagePin:
    """A pin as the page reads it: its ids stay Arrow arrays (a lake's pins name hundreds of
    thousands of episodes; `Pin.from_row` makes Python tuples of them and sorts them to check)."""

    name: str
    sql: str | None
    content_hash: str
    created_at_ns: int
    table_versions: dict[str, int]
    episode_ids: pa.Array
    attempt_ids: pa.Array


@dataclass(frozen=True, slots=True)
class PinCheck:
    """`pi_jobs.maintenance.datasets.DatasetCheck`'s figures for one PagePin."""

    pin: PagePin
    rows_present: int
    content_hash_now: str | None  # None when rows are missing

    @property
    def intact(self) -> bool:
        return (
            self.rows_present == len(self.pin.episode_ids) and self.content_hash_now == self.pin.content_hash
        )


def _pins_named(layout: LakeLayout, summaries: list[Any]) -> list[PagePin]:
    """The pins of `summaries` (PinSummary: each names its file), read from those files only:
    `PinStore.get` per pin reads one column of every pin's file (a page of 50 pins, 2,500 reads)."""
    import json

    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    from pi_format.lake import table_filesystem

    fs, base = table_filesystem(layout.pins)
    out = []
    for summary in summaries:
        table = pq.read_table(f"{base}/{summary.path}", filesystem=fs)
        table = table.filter(pc.equal(table.column("name"), summary.name))
        if table.num_rows == 0:
            raise LookupError(f"pin {summary.name!r} is not in its file {summary.path}")
        row = table.slice(0, 1)
        scalar = {c: row.column(c)[0] for c in ("sql", "content_hash", "created_at_ns", "table_versions")}
        out.append(
            PagePin(
                name=summary.name,
                sql=scalar["sql"].as_py(),
                content_hash=str(scalar["content_hash"].as_py()),
                created_at_ns=int(scalar["created_at_ns"].as_py()),
                table_versions={
                    str(k): int(v) for k, v in json.loads(scalar["table_versions"].as_py()).items()
                },
                episode_ids=row.column("episode_ids")[0].values,
                attempt_ids=row.column("attempt_ids")[0].values,
            )
        )
    return out


_KEY_SEP = "\x1f"  # pi_format.lake.visibility's: ids are names, they hold no control character


def _pinned(rows: pa.Table, keys: Any, pin: PagePin) -> pa.Table:
    """`pi_format.lake.pinned_rows(rows, pin.episode_ids, pin.attempt_ids)`, on Arrow arrays and
    with the rows' keys (`episode_id` + sep + `attempt_id`) made once for every pin."""
    import numpy as np
    import pyarrow.compute as pc

    if rows.num_rows == 0 or len(pin.episode_ids) == 0:
        return rows.slice(0, 0)
    wanted = pc.binary_join_element_wise(pin.episode_ids, pin.attempt_ids, _KEY_SEP)
    mask = pc.is_in(keys, value_set=wanted)
    found, found_keys = rows.filter(mask), pc.filter(keys, mask)
    if len(pc.unique(found_keys)) == found.num_rows:
        return found
    # a pair twice (a file being compacted read in both layouts) counts once
    order = pc.sort_indices(found_keys)
    ordered = pc.take(found_keys, order).to_numpy(zero_copy_only=False)
    first = np.concatenate([[True], ordered[1:] != ordered[:-1]])
    return found.take(pc.filter(order, pa.array(first)))


def check_pins(layout: LakeLayout, names: list[str]) -> list[PinCheck]:
    """`pi_jobs.maintenance.datasets.check_dataset`'s rows present and content hash of each pin
    in `names`, with the episodes table's rows read once for all of them (check_dataset reads
    them per pin), the pinned rows found and hashed by Arrow (`_pinned`, `fast_content_hash`):
    the same rows and the same digest, tested equal to it."""
    import pyarrow.compute as pc
    from deltalake import DeltaTable
    from pi_format.lake.pins import HASH_COLUMNS

    from pi_jobs.maintenance.datasets import get_dataset

    if not names:
        return []
    by_name = {s.name: s for s in PinStore(layout).summaries()}
    missing = [n for n in names if n not in by_name]
    if missing:
        get_dataset(layout, missing[0])  # raises DatasetError naming the pins there are
    table = DeltaTable(layout.episodes)
    rows, keys = None, None
    out = []
    for pin in _pins_named(layout, [by_name[n] for n in names]):
        # the check holds while neither the pin nor the episodes table changed (_page_cache)
        summary = by_name[pin.name]
        key = (layout.root, pin.name, summary.path, pin.content_hash, pin.created_at_ns, table.version())
        check = _page_cache.pin_check(key)
        if check is None:
            if rows is None:  # the rows are read once, for the pins not checked at this version
                rows = table.to_pyarrow_table(columns=list(HASH_COLUMNS))
                keys = pc.binary_join_element_wise(
                    rows.column("episode_id"), rows.column("attempt_id"), _KEY_SEP
                )
            found = _pinned(rows, keys, pin)
            present = found.num_rows
            check = PinCheck(
                pin, present, fast_content_hash(found) if present == len(pin.episode_ids) else None
            )
            _page_cache.keep_pin_check(key, check)
        out.append(check)
    return out


def pins_page(layout: LakeLayout, *, page: int, page_size: int) -> tuple[list[PinRow], int]:
    """One page of the pins (by name), each checked as `pilake dataset show` does, and the count."""
    summaries = sorted(PinStore(layout).summaries(), key=lambda p: p.name)
    shown = [p.name for p in summaries[page * page_size : (page + 1) * page_size]]
    out = []
    for check in check_pins(layout, shown):
        pin = check.pin
        out.append(
            PinRow(
                name=pin.name,
                sql=pin.sql or "(chosen by episode ids)",
                episodes=len(pin.episode_ids),
                content_hash=pin.content_hash,
                created_at=iso(pin.created_at_ns),
                table_versions=", ".join(f"{k} v{v}" for k, v in sorted(pin.table_versions.items())),
                rows_present=check.rows_present,
                intact=check.intact,
                first_episodes=tuple(pin.episode_ids.slice(0, 5).to_pylist()),
            )
        )
    return out, len(summaries)
