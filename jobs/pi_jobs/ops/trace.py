"""`pilake trace EPISODE_ID`: one episode's history, from the uploader through the job to the loader.

Merges, in time order, what every stage left about the episode:
- the JSON event logs (pi_format.jsonlog) of the uploader (spooled, sent, resent, acked), the
  stream job's sink (received, validated, quarantined, committed, catalog_recorded, duplicate)
  and the loader (opened), found as `*.jsonl` under the given directories;
- the lake: raw rows (what arrived, per attempt), quarantine rows (reason and details), releases
  and the `episodes` row (the commit marker; its `committed_at_ns` is set when the row is made);
- the catalog: the indexed row (its Delta version and index time) and the freshness row.

The lake and the catalog are read even when no log exists (a stage that ran without event
logs still shows up through what it wrote).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

from pi_format import LakeLayout
from pi_format.jsonlog import read_events

from pi_jobs.errors import PiJobsError

log = logging.getLogger("pi_jobs.ops")

# Fields every event line carries; the rest are shown as the event's details.
_ENVELOPE = ("ts", "ts_ns", "level", "component", "event", "episode_id", "attempt_id")


class TraceError(PiJobsError):
    """An episode cannot be traced (bad id)."""


@dataclass(frozen=True, slots=True)
class TraceEvent:
    """One step of an episode's history.

    Example:
        >>> TraceEvent(1_700_000_000_000_000_000, "uploader", "sent", None, {"messages": 7}).line()
        '2023-11-14T22:13:20.000000Z  uploader  sent  messages=7'
    """

    ts_ns: int
    source: str  # uploader | stream | loader (logs), lake, catalog
    event: str
    attempt_id: str | None
    details: dict[str, Any] = field(default_factory=dict)

    def line(self) -> str:
        """The event as one line of text."""
        when = datetime.fromtimestamp(self.ts_ns / 1e9, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        parts = [when, f"{self.source:<8}", self.event]
        if self.attempt_id:
            parts.append(f"attempt={self.attempt_id}")
        parts += [f"{k}={_show(v)}" for k, v in self.details.items() if v is not None]
        return "  ".join(parts)


def _show(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= 200 else text[:200] + "..."


def log_events(episode_id: str, log_dirs: Iterable[Path]) -> list[TraceEvent]:
    """The episode's events in every `*.jsonl` under `log_dirs` (recursively).

    Example:
        >>> [e.event for e in log_events("sim0-r000-e00000", [Path(".pilake/logs/events")])]
        ['spooled', 'sent', 'received', 'validated', 'committed', 'catalog_recorded', 'acked']
    """
    needle = json.dumps(episode_id)  # lines are filtered as text before parsing
    out: list[TraceEvent] = []
    for directory in log_dirs:
        if not directory.is_dir():
            continue
        for path in sorted(directory.rglob("*.jsonl")):
            if needle not in path.read_text(encoding="utf-8", errors="replace"):
                continue
            for doc in read_events(path):
                if doc.get("episode_id") != episode_id:
                    continue
                details = {k: v for k, v in doc.items() if k not in _ENVELOPE}
                out.append(
                    TraceEvent(
                        int(doc.get("ts_ns") or 0),
                        str(doc.get("component", path.stem)),
                        str(doc.get("event", "log")),
                        doc.get("attempt_id"),
                        details,
                    )
                )
    return out


# Open table handles kept by a long-running process (`pilake ui` traces an episode per page):
# brought up to date with the newer log entries only, instead of replaying each table's log
# again for every trace. uri -> (lock, table)
_open_tables: dict[str, tuple[threading.Lock, Any]] = {}
_open_tables_lock = threading.Lock()


def _dataset(table_uri: str) -> Any:
    """The table's current snapshot as a pyarrow dataset (raises when there is no table)."""
    from deltalake import DeltaTable

    with _open_tables_lock:
        lock, table = _open_tables.get(table_uri, (threading.Lock(), None))
        _open_tables.setdefault(table_uri, (lock, None))
    with lock:
        if table is None:
            table = DeltaTable(table_uri)
        else:
            table.update_incremental()
        with _open_tables_lock:
            _open_tables[table_uri] = (lock, table)
        return table.to_pyarrow_dataset()


def warm_tables(layout: LakeLayout) -> None:
    """Open the tables a trace reads, so that a server's first trace does not wait for them."""
    for uri in (layout.raw, layout.quarantine, layout.quarantine_releases, layout.episodes):
        try:
            _dataset(uri)
        except Exception as err:  # a lake without this table yet
            log.debug("trace: no table at %s (%s)", uri, err)


def _rows(table_uri: str, episode_id: str, columns: Sequence[str]) -> list[dict[str, Any]]:
    import pyarrow.dataset as pads

    try:
        dataset = _dataset(table_uri)
    except Exception as err:  # TableNotFoundError: a lake without this table yet
        log.debug("trace: no table at %s (%s)", table_uri, err)
        return []
    table = dataset.to_table(columns=list(columns), filter=pads.field("episode_id") == episode_id)
    rows: list[dict[str, Any]] = table.to_pylist()
    return rows


def _indexed_rows(table_uri: str, episode_id: str, columns: Sequence[str]) -> list[dict[str, Any]]:
    """`_rows` through each data file's kept (episode id, row group) index (`_file_index`): the
    raw table's ids are not sorted in its files, so a filtered scan reads the id column of every
    file on every trace (~0.5 s at 100,000 episodes). `_rows` itself where a file lacks a column
    (a partition column, an older schema)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from pi_jobs.ops import _file_index

    try:
        dataset = _dataset(table_uri)
    except Exception as err:  # TableNotFoundError: a lake without this table yet
        log.debug("trace: no table at %s (%s)", table_uri, err)
        return []
    fs, files = dataset.filesystem, list(dataset.files)
    _file_index.forget(table_uri, files)
    parts = []
    for path in files:
        opener = partial(pq.ParquetFile, path, filesystem=fs)
        groups, meta = _file_index.row_groups(table_uri, path, "episode_id", [episode_id], opener)
        if not groups:
            continue
        if any(c not in meta.schema.names for c in columns):
            return _rows(table_uri, episode_id, columns)
        rows = pq.ParquetFile(path, filesystem=fs, metadata=meta).read_row_groups(
            groups, columns=[*columns, "episode_id"]
        )
        parts.append(rows.filter(pc.equal(rows.column("episode_id"), episode_id)).select(list(columns)))
    out: list[dict[str, Any]] = pa.concat_tables(parts).to_pylist() if parts else []
    return out


def lake_events(episode_id: str, layout: LakeLayout) -> list[TraceEvent]:
    """What the lake holds about the episode: raw arrivals per attempt, quarantine rows,
    releases and the `episodes` row (the commit marker).

    Example:
        >>> [e.event for e in lake_events("sim0-r000-e00000", LakeLayout(".pilake/lake"))]
        ['raw_received', 'episodes_row']
    """
    out: list[TraceEvent] = []
    # The four tables are read at once: each read is mostly Delta log replay and Parquet footer
    # parsing outside the GIL (the UI's Episode page waits for them: ~0.7 s one after the other
    # on a compacted lake of 100,000 episodes).
    wanted = {
        "raw": (
            layout.raw,
            ["attempt_id", "chunk_index", "kafka_partition", "kafka_offset", "received_at_ns"],
        ),
        "quarantine": (
            layout.quarantine,
            ["attempt_id", "reason", "details", "raw_pointer", "quarantined_at_ns"],
        ),
        "releases": (layout.quarantine_releases, ["attempt_id", "outcome", "note", "released_at_ns"]),
        "episodes": (layout.episodes, ["attempt_id", "received_at_ns", "committed_at_ns", "step_count"]),
    }
    with ThreadPoolExecutor(max_workers=len(wanted), thread_name_prefix="trace") as pool:
        futures = {
            name: pool.submit(_indexed_rows if name == "raw" else _rows, uri, episode_id, cols)
            for name, (uri, cols) in wanted.items()
        }
        found = {name: future.result() for name, future in futures.items()}
    raw = found["raw"]
    by_attempt: dict[str, list[dict[str, Any]]] = {}
    for row in raw:
        by_attempt.setdefault(row["attempt_id"], []).append(row)
    for attempt, rows in by_attempt.items():
        offsets = sorted((r["kafka_partition"], r["kafka_offset"]) for r in rows)
        out.append(
            TraceEvent(
                min(r["received_at_ns"] for r in rows),
                "lake",
                "raw_received",
                attempt,
                {
                    "messages": len(rows),
                    "last_received": _iso(max(r["received_at_ns"] for r in rows)),
                    "offsets": f"{offsets[0]}..{offsets[-1]}" if len(offsets) > 1 else str(offsets[0]),
                },
            )
        )
    for row in found["quarantine"]:
        out.append(
            TraceEvent(
                row["quarantined_at_ns"],
                "lake",
                "quarantined",
                row["attempt_id"],
                {"reason": row["reason"], "details": row["details"], "raw": row["raw_pointer"]},
            )
        )
    for row in found["releases"]:
        out.append(
            TraceEvent(
                row["released_at_ns"],
                "lake",
                "released",
                row["attempt_id"],
                {"outcome": row["outcome"], "note": row["note"]},
            )
        )
    for row in found["episodes"]:
        out.append(
            TraceEvent(
                row["committed_at_ns"],  # set when the row was made, just before its commit
                "lake",
                "episodes_row",
                row["attempt_id"],
                {"steps": row["step_count"], "manifest_received": _iso(row["received_at_ns"])},
            )
        )
    return out


def catalog_events(episode_id: str, catalog: Any) -> list[TraceEvent]:
    """The catalog's index row (when it was indexed, at which Delta version) and freshness row.

    Example:
        >>> catalog_events("sim0-r000-e00000", Catalog(".pilake/catalog"))
    """
    out: list[TraceEvent] = []
    catalog.ensure_schema()
    indexed = catalog.query_arrow(
        "SELECT attempt_id, episodes_version, toUnixTimestamp64Milli(indexed_at) AS at_ms "
        "FROM episodes WHERE episode_id = {e:String}",
        {"e": episode_id},
    ).to_pylist()
    for row in indexed:
        out.append(
            TraceEvent(
                int(row["at_ms"]) * 1_000_000,
                "catalog",
                "indexed",
                _text(row["attempt_id"]),
                {"episodes_version": row["episodes_version"]},
            )
        )
    fresh = catalog.query_arrow(
        "SELECT attempt_id, published_at_ns, lake_committed_at_ns, readable_at_ns, episodes_version "
        "FROM episode_freshness WHERE episode_id = {e:String} ORDER BY readable_at_ns",
        {"e": episode_id},
    ).to_pylist()
    for row in fresh:
        published = row["published_at_ns"]
        freshness = None if published is None else round((row["readable_at_ns"] - published) / 1e9, 3)
        out.append(
            TraceEvent(
                int(row["readable_at_ns"]),
                "catalog",
                "readable",
                _text(row["attempt_id"]),
                {
                    "last_published": _iso(published),
                    "freshness_s": freshness,
                    "episodes_version": row["episodes_version"],
                },
            )
        )
    return out


def trace_episode(
    episode_id: str, *, layout: LakeLayout | None, catalog: Any | None, log_dirs: Sequence[Path]
) -> list[TraceEvent]:
    """Every event known about `episode_id`, oldest first (ties keep source order: logs, lake,
    catalog).

    Raises:
        TraceError: an empty episode id.

    Example:
        >>> for e in trace_episode("sim0-r000-e00000", layout=LakeLayout(".pilake/lake"),
        ...                        catalog=Catalog(".pilake/catalog"), log_dirs=[Path(".pilake/logs")]):
        ...     print(e.line())
    """
    if not isinstance(episode_id, str) or not episode_id.strip():
        raise TraceError(f"episode id must be a non-empty string, got {episode_id!r}")
    events = log_events(episode_id, log_dirs)
    if layout is not None:
        events += lake_events(episode_id, layout)
    if catalog is not None:
        events += catalog_events(episode_id, catalog)
    return sorted(events, key=lambda e: e.ts_ns)


def _iso(ns: int | None) -> str | None:
    if ns is None:
        return None
    return datetime.fromtimestamp(ns / 1e9, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
