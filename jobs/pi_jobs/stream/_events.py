"""The lake sink's episode events (JSON lines for `pilake trace`) and freshness records.

Runs in the Flink Python worker next to `_sink`: each sink subtask writes its events to
`<event_log_dir>/stream-<subtask>-<pid>.jsonl` (pi_format.jsonlog; none when no directory is
configured) and, after each group commit, the freshness rows of the episodes it made visible
to the catalog (`episode_freshness`, read by `pilake freshness`).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

from pi_format.jsonlog import default_event_log, event_logger, log_event

from pi_jobs.stream._records import freshness_rows


def offset_ranges(messages: Iterable[Any]) -> str:
    """Kafka offsets of messages (with `partition` and `offset`) as "partition:first..last" per
    partition (with a count when there are gaps): short in a log line, whatever the episode's size.

    Example:
        >>> offset_ranges(msgs)  # offsets 0-6 of partition 1, 4 and 9 of partition 0
        '0:4..9 (2), 1:0..6'
    """
    by_partition: dict[int, list[int]] = {}
    for m in messages:
        by_partition.setdefault(int(m.partition), []).append(int(m.offset))
    parts = []
    for partition, offsets in sorted(by_partition.items()):
        low, high = min(offsets), max(offsets)
        text = f"{partition}:{low}" if low == high else f"{partition}:{low}..{high}"
        parts.append(text if len(set(offsets)) == high - low + 1 else f"{text} ({len(offsets)})")
    return ", ".join(parts)


class SinkEvents:
    """One sink subtask's event log.

    Example:
        >>> events = SinkEvents(0, "/data/pilake/logs/events")
        >>> events.emit("validated", "sim0-r000-e00000", "5c0f...", steps=120)
    """

    def __init__(self, subtask: int, event_log_dir: str) -> None:
        self.subtask = subtask
        path = default_event_log(f"stream-{subtask}", event_log_dir or None)
        self._log = event_logger("pi_jobs.stream.events", path, "stream")

    def emit(self, event: str, episode_id: str | None, attempt_id: str | None, **fields: Any) -> None:
        """Write one event (fields as in pi_format.jsonlog.log_event)."""
        log_event(
            self._log, event, episode_id=episode_id, attempt_id=attempt_id, subtask=self.subtask, **fields
        )

    def group_committed(
        self, catalog: Any, result: Any, published_at_ns: Mapping[str, int | None], lake_committed_ns: int
    ) -> None:
        """After a group commit's catalog record returned: its freshness rows, and per episode
        a "committed" event (at the time the Delta commit returned) and a "catalog_recorded" one.

        Readable = both the Delta commit and the catalog record returned (a SQL selection sees
        the episode from then on); one row per episode, from the commit that made it visible.
        """
        readable_ns = time.time_ns()
        version = int(result.version)
        ids = result.episodes.column("episode_id").to_pylist()
        attempts = result.episodes.column("attempt_id").to_pylist()
        catalog.record_freshness(
            freshness_rows(ids, attempts, dict(published_at_ns), lake_committed_ns, readable_ns, version)
        )
        for eid, attempt in zip(ids, attempts, strict=True):
            self.emit(
                "committed",
                eid,
                attempt,
                ts_ns=lake_committed_ns,
                episodes_version=version,
                group_episodes=len(ids),
            )
            self.emit(
                "catalog_recorded",
                eid,
                attempt,
                episodes_version=version,
                published_at_ns=published_at_ns.get(eid),
                readable_at_ns=readable_ns,
            )
