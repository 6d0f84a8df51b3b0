"""Structured event logs: one JSON object per line, through the stdlib `logging`.

Every pi-lake component that touches an episode (the uploader, the stream job's sink, the
loader) writes the events of an episode's life with `log_event` to a logger whose handler
carries a `JsonLineFormatter`; `pilake trace EPISODE_ID` reads the files back and merges them
in time order. The formatter lives here because pi_ingest and pi_loader may import only
pi_format; it is pure (no I/O beyond the handler the caller attaches).

A line holds `ts` (UTC ISO-8601 with microseconds), `ts_ns`, `level`, `component`, `event`,
`episode_id`, `attempt_id` and the event's own fields. Non-JSON values are written with str().

Example:
    >>> log = event_logger("pi_ingest.events", Path("logs/events/uploader-123.jsonl"), "uploader")
    >>> log_event(log, "sent", episode_id="sim0-r000-e00000", attempt_id=None, messages=7)
"""

from __future__ import annotations

import json
import logging
import os
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

# Where the pilake CLI points every component's event log (a directory); components started
# without it (a library user's Uploader, a Dataset in a notebook) write none unless given a path.
EVENT_LOG_DIR_ENV = "PILAKE_EVENT_LOG_DIR"
# The record attribute that carries an event's fields (logging's `extra`).
_FIELDS_ATTR = "pilake_event"


class JsonLineFormatter(logging.Formatter):
    """Formats a log record as one JSON object (no newline inside it).

    Records made by `log_event` carry their event name and fields; any other record becomes
    event "log" with its message in `message`.

    Example:
        >>> handler.setFormatter(JsonLineFormatter("uploader"))
    """

    def __init__(self, component: str) -> None:
        super().__init__()
        if not component:
            raise ValueError("component must be a non-empty name such as 'uploader'")
        self.component = component

    def format(self, record: logging.LogRecord) -> str:
        fields: dict[str, Any] = dict(getattr(record, _FIELDS_ATTR, None) or {})
        ts_ns = fields.pop("ts_ns", None) or int(record.created * 1e9)
        doc: dict[str, Any] = {
            "ts": datetime.fromtimestamp(ts_ns / 1e9, UTC).isoformat(timespec="microseconds"),
            "ts_ns": ts_ns,
            "level": record.levelname.lower(),
            "component": self.component,
            "event": fields.pop("event", "log"),
            "episode_id": fields.pop("episode_id", None),
            "attempt_id": fields.pop("attempt_id", None),
        }
        if not getattr(record, _FIELDS_ATTR, None):
            doc["message"] = record.getMessage()
        for key, value in fields.items():
            doc.setdefault(key, value)
        if record.exc_info:
            doc["error"] = self.formatException(record.exc_info)
        return json.dumps(doc, default=str, separators=(",", ":"))


def log_event(
    logger: logging.Logger,
    event: str,
    *,
    episode_id: str | None,
    attempt_id: str | None,
    level: int = logging.INFO,
    **fields: Any,
) -> None:
    """Log one event of an episode's life; a no-op when the logger is not enabled for `level`.

    The event's time is now, or the field `ts_ns` (epoch ns) when the event happened earlier
    (a commit that returned before the work that followed it).

    Example:
        >>> log_event(log, "quarantined", episode_id="e1", attempt_id="a1", reason="bad_magic")
    """
    if not logger.isEnabledFor(level):
        return
    doc = {"event": event, "episode_id": episode_id, "attempt_id": attempt_id, "ts_ns": time.time_ns()}
    doc.update(fields)
    logger.log(level, event, extra={_FIELDS_ATTR: doc})


def event_logger(name: str, path: Path | str | None, component: str) -> logging.Logger:
    """A logger writing JSON lines to `path` (appending; parent directories made).

    Its name is `name` plus the file's path, so two objects of a process that log to different
    files never write into each other's; calling it again with the same path returns the same
    logger with its one handler. With `path` None it is the logger `name`, disabled unless the
    application configured it: event logs are off by default outside the pilake CLI. Events do
    not propagate to the root logger, so they never clutter a console.

    Example:
        >>> log = event_logger("pi_loader.events", "/tmp/events/loader.jsonl", "loader")
    """
    if path is None:
        logger = logging.getLogger(name)
        if not logger.handlers:
            # off and cheap: log_event returns at its level check instead of building records
            # that would reach a console through the root logger
            logger.propagate = False
            logger.setLevel(logging.CRITICAL + 1)
        return logger
    target = str(Path(path).absolute())
    logger = logging.getLogger(f"{name}:{target}")
    for handler in logger.handlers:
        if isinstance(handler, logging.FileHandler) and handler.baseFilename == target:
            return logger
    Path(target).parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(target, encoding="utf-8")  # append mode: one file per process
    handler.setFormatter(JsonLineFormatter(component))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    return logger


def default_event_log(component: str, directory: str | Path | None = None) -> Path | None:
    """`<directory or $PILAKE_EVENT_LOG_DIR>/<component>-<pid>.jsonl`, or None when neither is set.

    One file per process: several processes never interleave inside a line.

    Example:
        >>> default_event_log("uploader", "/data/pilake/logs/events")
        PosixPath('/data/pilake/logs/events/uploader-4242.jsonl')
    """
    base = directory or os.environ.get(EVENT_LOG_DIR_ENV)
    if not base:
        return None
    return Path(base) / f"{component}-{os.getpid()}.jsonl"


def read_events(path: Path | str) -> list[dict[str, Any]]:
    """The JSON objects of one event log, skipping lines that are not JSON objects (a line cut
    by a crash).

    Example:
        >>> [e["event"] for e in read_events("logs/events/uploader-4242.jsonl")]
        ['spooled', 'sent', 'acked']
    """
    out: list[dict[str, Any]] = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            if isinstance(doc, dict):
                out.append(doc)
    return out
