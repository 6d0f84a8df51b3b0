"""The uploader's durable spool: episodes wait on disk until the lake confirms them.

Sits between the robot and the Kafka producer. An entry is two files named after the episode:
`<id>.piep`, the exact wire messages (a bundle, so a re-send is byte-identical), and
`<id>.json`, a small state record (attempts, first_spooled_ns, last_sent_ns, sizes, digest).
Both are written atomically (temp file, fsync, rename, fsync of the directory), so a process
killed at any instant leaves either the old or the new version of each file:

* a bundle without a state file (killed inside `add`) is recovered as a never-sent entry;
* a state file without a bundle (killed inside `confirm`, which deletes the bundle first) is
  garbage and removed;
* leftover `*.tmp` files are ignored and removed.

Next to the entries, `ledger.jsonl` keeps an append-only history of the spool: one line when an
episode is submitted (id, digest, sizes) and one when the lake confirmed it (status, attempt).
Entries are deleted once confirmed, the ledger is not: it is what `pilake audit` counts as
"produced". Each line is appended with fsync; a torn last line (killed mid-write) is skipped
on read, and a pending entry whose "submitted" line never made it is given one on start.

One process should own a spool directory at a time (the uploader); the spool does not lock it.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pi_format.episode import check_name
from pi_format.errors import ProtocolError
from pi_format.wire import BUNDLE_SUFFIX, read_bundle, write_bundle

from pi_ingest._metrics import EPISODES_SPOOLED
from pi_ingest.errors import SpoolError

_STATE_SUFFIX = ".json"
_TMP_SUFFIX = ".tmp"
_STATE_VERSION = 1
LEDGER_NAME = "ledger.jsonl"


@dataclass(frozen=True, slots=True)
class LedgerEvent:
    """One line of a spool's ledger.

    `event` is "submitted" (then `sha256`, `message_count`, `size_bytes` are set) or
    "confirmed" (then `status` is the lake's ack status, "committed" or "quarantined", and
    `attempt_id` the attempt the ack named).

    Example:
        >>> [e.event for e in read_ledger(Path("spool"))]
        ['submitted', 'confirmed']
    """

    event: str
    episode_id: str
    at_ns: int
    sha256: str = ""
    message_count: int = 0
    size_bytes: int = 0
    status: str = ""
    attempt_id: str = ""


def read_ledger(root: Path) -> list[LedgerEvent]:
    """Every event in the ledger of the spool at `root`, oldest first ([] when there is none).

    A line that does not parse is skipped: only the last line can be torn (appends are
    fsynced one by one), and a torn "submitted" line is re-written on the spool's next start.

    Example:
        >>> len({e.episode_id for e in read_ledger(Path("spool")) if e.event == "submitted"})
        12
    """
    try:
        text = (Path(root) / LEDGER_NAME).read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return []
    events = []
    for line in text.splitlines():
        try:
            doc = json.loads(line)
            events.append(
                LedgerEvent(
                    event=str(doc["event"]),
                    episode_id=str(doc["episode_id"]),
                    at_ns=int(doc["at_ns"]),
                    sha256=str(doc.get("sha256", "")),
                    message_count=int(doc.get("message_count", 0)),
                    size_bytes=int(doc.get("size_bytes", 0)),
                    status=str(doc.get("status", "")),
                    attempt_id=str(doc.get("attempt_id", "")),
                )
            )
        except (ValueError, KeyError, TypeError):
            continue
    return events


@dataclass(frozen=True, slots=True)
class SpoolEntry:
    """One pending episode.

    `attempts` counts completed sends; `last_sent_ns` is the wall-clock time of the last one
    (None if never sent).
    """

    episode_id: str
    bundle_path: Path
    message_count: int
    size_bytes: int
    attempts: int
    last_sent_ns: int | None


def _digest(messages: Sequence[bytes]) -> str:
    """SHA-256 over length-prefixed messages: equal iff the message lists are identical."""
    h = hashlib.sha256()
    for m in messages:
        h.update(struct.pack(">I", len(m)))
        h.update(m)
    return h.hexdigest()


def _write_json_atomic(path: Path, doc: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + _TMP_SUFFIX)
    with open(tmp, "wb") as f:
        f.write(json.dumps(doc, sort_keys=True).encode())
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Spool:
    """A directory of episodes waiting for the lake's acknowledgement.

    Args:
        root: the spool directory; created if missing.

    Example:
        >>> spool = Spool(Path("/var/spool/pilake"))
        >>> spool.add(episode.episode_id, encode_episode(episode))
        >>> [e.episode_id for e in spool.entries()]
        ['r1-000001']
        >>> spool.confirm("r1-000001")
        True
    """

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self._recover()

    # -- paths ---------------------------------------------------------------------------------

    def _bundle(self, episode_id: str) -> Path:
        return self.root / f"{episode_id}{BUNDLE_SUFFIX}"

    def _state(self, episode_id: str) -> Path:
        return self.root / f"{episode_id}{_STATE_SUFFIX}"

    # -- crash recovery ------------------------------------------------------------------------

    def _ledger_append(self, doc: dict[str, Any]) -> None:
        line = json.dumps(doc, sort_keys=True).encode() + b"\n"
        with open(self.root / LEDGER_NAME, "a+b") as f:  # + : read the last byte
            size = f.seek(0, os.SEEK_END)
            if size and os.pread(f.fileno(), 1, size - 1) != b"\n":
                line = b"\n" + line  # end a line torn by a crash, so this one stays readable
            f.write(line)
            f.flush()
            os.fsync(f.fileno())

    def _ledger_submitted(self, doc: dict[str, Any]) -> None:
        self._ledger_append(
            {
                "event": "submitted",
                "episode_id": doc["episode_id"],
                "at_ns": time.time_ns(),
                "sha256": doc["sha256"],
                "message_count": doc["message_count"],
                "size_bytes": doc["size_bytes"],
            }
        )

    def _recover(self) -> None:
        """Remove temp files and orphan state files; give orphan bundles a fresh state; give
        pending entries whose "submitted" ledger line is missing (killed in `add`) that line."""
        for tmp in self.root.glob(f"*{_TMP_SUFFIX}"):
            tmp.unlink(missing_ok=True)
        for state in self.root.glob(f"*{_STATE_SUFFIX}"):
            eid = state.name[: -len(_STATE_SUFFIX)]
            if not self._bundle(eid).exists():
                state.unlink(missing_ok=True)
        for bundle in self.root.glob(f"*{BUNDLE_SUFFIX}"):
            eid = bundle.name[: -len(BUNDLE_SUFFIX)]
            if self._state(eid).exists():
                continue
            try:
                messages = read_bundle(bundle)
            except ProtocolError as err:
                raise SpoolError(f"spool file {bundle} is damaged ({err}); move it away to continue") from err
            self._write_state(
                eid, messages, attempts=0, first_ns=bundle.stat().st_mtime_ns, last_sent_ns=None
            )
        in_ledger = {(e.episode_id, e.sha256) for e in read_ledger(self.root) if e.event == "submitted"}
        for state in self.root.glob(f"*{_STATE_SUFFIX}"):
            doc = self._read_state(state.name[: -len(_STATE_SUFFIX)])
            if doc is not None and (doc.get("episode_id"), doc.get("sha256")) not in in_ledger:
                self._ledger_submitted(doc)

    # -- state ---------------------------------------------------------------------------------

    def _write_state(
        self,
        episode_id: str,
        messages: Sequence[bytes],
        *,
        attempts: int,
        first_ns: int,
        last_sent_ns: int | None,
    ) -> dict[str, Any]:
        doc = {
            "version": _STATE_VERSION,
            "episode_id": episode_id,
            "message_count": len(messages),
            "size_bytes": sum(len(m) for m in messages),
            "sha256": _digest(messages),
            "attempts": attempts,
            "first_spooled_ns": first_ns,
            "last_sent_ns": last_sent_ns,
        }
        _write_json_atomic(self._state(episode_id), doc)
        return doc

    def _read_state(self, episode_id: str) -> dict[str, Any] | None:
        try:
            doc: dict[str, Any] = json.loads(self._state(episode_id).read_bytes())
        except FileNotFoundError:
            return None
        except ValueError as err:
            raise SpoolError(
                f"spool state {self._state(episode_id)} is not valid JSON ({err}); delete it to "
                "have the entry re-created from its bundle"
            ) from err
        if not self._bundle(episode_id).exists():
            return None
        return doc

    def _entry(self, doc: dict[str, Any]) -> SpoolEntry:
        try:
            eid = str(doc["episode_id"])
            last = doc["last_sent_ns"]
            return SpoolEntry(
                episode_id=eid,
                bundle_path=self._bundle(eid),
                message_count=int(doc["message_count"]),
                size_bytes=int(doc["size_bytes"]),
                attempts=int(doc["attempts"]),
                last_sent_ns=None if last is None else int(last),
            )
        except (KeyError, TypeError, ValueError) as err:
            raise SpoolError(f"spool state {doc!r:.200} is missing a field: {err}") from err

    # -- public API ----------------------------------------------------------------------------

    def add(self, episode_id: str, messages: Sequence[bytes]) -> SpoolEntry:
        """Durably store an episode's messages; returns once they are on disk.

        Adding the same id with the same bytes again is a no-op that returns the existing entry.

        Raises:
            ValueError: `episode_id` is not a safe name, or `messages` is empty.
            SpoolError: the id is already spooled with different bytes.
        """
        check_name("episode_id", episode_id)
        if not messages:
            raise ValueError(f"messages must hold at least one message for {episode_id}, got none")
        existing = self._read_state(episode_id)
        if existing is not None:
            if existing.get("sha256") != _digest(messages):
                raise SpoolError(
                    f"episode {episode_id} is already spooled with different bytes; episode ids must "
                    "be unique: give the new recording a new id"
                )
            return self._entry(existing)
        write_bundle(self._bundle(episode_id), list(messages))
        doc = self._write_state(episode_id, messages, attempts=0, first_ns=time.time_ns(), last_sent_ns=None)
        self._ledger_submitted(doc)
        EPISODES_SPOOLED.inc()
        return self._entry(doc)

    def entries(self) -> list[SpoolEntry]:
        """Every pending entry, oldest first (by when it was spooled, then by id)."""
        docs = []
        for state in self.root.glob(f"*{_STATE_SUFFIX}"):
            doc = self._read_state(state.name[: -len(_STATE_SUFFIX)])
            if doc is not None:
                docs.append(doc)
        docs.sort(key=lambda d: (int(d.get("first_spooled_ns", 0)), str(d.get("episode_id"))))
        return [self._entry(d) for d in docs]

    def get(self, episode_id: str) -> SpoolEntry | None:
        """The entry of `episode_id`, or None when it is not spooled."""
        check_name("episode_id", episode_id)
        doc = self._read_state(episode_id)
        return None if doc is None else self._entry(doc)

    def messages(self, episode_id: str) -> list[bytes]:
        """The spooled messages of `episode_id`, checked against the recorded digest.

        Raises:
            KeyError: the episode is not spooled.
            SpoolError: the bundle on disk is damaged.
        """
        check_name("episode_id", episode_id)
        doc = self._read_state(episode_id)
        if doc is None:
            raise KeyError(f"episode {episode_id} is not in the spool at {self.root}")
        try:
            messages = read_bundle(self._bundle(episode_id))
        except ProtocolError as err:
            raise SpoolError(f"spooled bundle of {episode_id} is damaged: {err}") from err
        if _digest(messages) != doc.get("sha256"):
            raise SpoolError(
                f"spooled bundle of {episode_id} does not match its recorded digest (disk corruption?)"
            )
        return messages

    def mark_sent(self, episode_id: str, sent_at_ns: int) -> SpoolEntry:
        """Record that every message of the episode was delivered to the broker at `sent_at_ns`.

        Raises:
            KeyError: the episode is not spooled (e.g. it was confirmed meanwhile).
        """
        doc = self._read_state(episode_id)
        if doc is None:
            raise KeyError(f"episode {episode_id} is not in the spool at {self.root}")
        doc["attempts"] = int(doc["attempts"]) + 1
        doc["last_sent_ns"] = int(sent_at_ns)
        _write_json_atomic(self._state(episode_id), doc)
        return self._entry(doc)

    def confirm(self, episode_id: str, *, status: str = "committed", attempt_id: str = "") -> bool:
        """Delete the entry once the lake has it, and note that in the ledger. Returns True if
        it was spooled.

        Args:
            status: the lake's ack status ("committed" or "quarantined"), kept in the ledger.
            attempt_id: the processing attempt the ack named, kept in the ledger.
        """
        check_name("episode_id", episode_id)
        bundle, state = self._bundle(episode_id), self._state(episode_id)
        existed = bundle.exists()
        # Bundle first: a crash in between leaves an orphan state file, which is garbage,
        # rather than an orphan bundle, which would be re-sent.
        bundle.unlink(missing_ok=True)
        state.unlink(missing_ok=True)
        if existed:
            _fsync_dir(self.root)
            self._ledger_append(
                {
                    "event": "confirmed",
                    "episode_id": episode_id,
                    "at_ns": time.time_ns(),
                    "status": status,
                    "attempt_id": attempt_id,
                }
            )
        return existed

    def __len__(self) -> int:
        n = len(_STATE_SUFFIX)
        return sum(1 for s in self.root.glob(f"*{_STATE_SUFFIX}") if self._bundle(s.name[:-n]).exists())
