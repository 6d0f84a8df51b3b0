"""The operator pages' reads: the quarantine (rows, their raw messages, the release command)
through pi_jobs.ops.quarantine, and dataset pins with their integrity as
pi_jobs.maintenance.datasets checks it. Read-only.
"""

from __future__ import annotations

import hashlib
import shlex
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pi_format import LakeLayout
from pi_format.lake import PinStore

from pi_jobs.ui._reads import delta_table, iso

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


def _previews(layout: LakeLayout, entries: list[Any]) -> dict[str, tuple[dict[str, str], ...]]:
    """The first raw messages of each entry (what `pilake quarantine show` prints), read in one
    scan of the raw table for the whole page (one scan per row cost ~20 ms each)."""
    import pyarrow.compute as pc

    if not entries:
        return {}
    try:
        rows = delta_table(
            layout.raw,
            columns=["attempt_id", "kafka_topic", "kafka_partition", "kafka_offset", "message"],
            filters=[("attempt_id", "in", sorted({e.attempt_id for e in entries}))],
        )
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
    from pi_jobs.ops.quarantine import list_quarantine

    entries = list_quarantine(layout, include_closed=include_closed)[::-1]
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


def check_pins(layout: LakeLayout, names: list[str]) -> list[Any]:
    """`pi_jobs.maintenance.datasets.check_dataset` of each pin in `names`, with the episodes
    table's rows read once for all of them (check_dataset reads them per pin): the same
    functions on the same rows (`pinned_rows`, `content_hash`), tested equal to it."""
    from deltalake import DeltaTable
    from pi_format.lake import content_hash, pinned_rows
    from pi_format.lake.pins import HASH_COLUMNS

    from pi_jobs.maintenance.datasets import DatasetCheck, get_dataset

    if not names:
        return []
    rows = DeltaTable(layout.episodes).to_pyarrow_table(columns=list(HASH_COLUMNS))
    out = []
    for name in names:
        pin = get_dataset(layout, name)
        found = pinned_rows(rows, pin.episode_ids, pin.attempt_ids)
        present = found.num_rows
        out.append(
            DatasetCheck(pin, present, content_hash(found) if present == len(pin.episode_ids) else None)
        )
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
                table_versions=", ".join(f"{k} v{v}" for k, v in sorted(dict(pin.table_versions).items())),
                rows_present=check.rows_present,
                intact=check.intact,
                first_episodes=tuple(pin.episode_ids[:5]),
            )
        )
    return out, len(summaries)
