"""The loader's episode events for `pilake trace` (JSON lines, pi_format.jsonlog).

Off unless `$PILAKE_EVENT_LOG_DIR` is set (the pilake CLI sets it): opening a Dataset then
writes one "opened" line per selected episode (the attempt it reads and the pinned table
versions), never anything per sample. A selection larger than `MAX_EPISODE_EVENTS` writes one
summary line instead, so opening a million-episode dataset stays cheap.
"""

from __future__ import annotations

from pi_format.jsonlog import default_event_log, event_logger, log_event

from pi_loader.selection._snapshot import Snapshot

# ~10 us a line: 10,000 episodes add ~0.1 s to an open.
MAX_EPISODE_EVENTS = 10_000


def log_opened(snapshot: Snapshot) -> None:
    """Write the "opened" events of a freshly opened Dataset, when event logs are on.

    Example:
        >>> log_opened(dataset.snapshot)
    """
    path = default_event_log("loader")
    if path is None:
        return
    events = event_logger("pi_loader.events", path, "loader")
    versions = dict(snapshot.table_versions)
    if len(snapshot.episode_ids) > MAX_EPISODE_EVENTS:
        log_event(
            events,
            "opened_many",
            episode_id=None,
            attempt_id=None,
            episodes=len(snapshot.episode_ids),
            table_versions=versions,
            note=f"more than {MAX_EPISODE_EVENTS} episodes: no per-episode events",
        )
        return
    for episode_id, attempt_id in zip(snapshot.episode_ids, snapshot.attempt_ids, strict=True):
        log_event(events, "opened", episode_id=episode_id, attempt_id=attempt_id, table_versions=versions)
