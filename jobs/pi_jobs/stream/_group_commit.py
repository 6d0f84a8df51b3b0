"""The group commit of the stream sink: commit the waiting group, record it in the catalog,
ack it, and answer duplicates (a mixin of pi_jobs.stream._sink.EpisodeSinkFunction, whose
attributes it uses: the writer, the acks, the events, the progress counts).

Quarantines join the same group (format/SPEC.md 9.5): a refused message or episode waits in
`refused` with its raw rows and its quarantine row, and the group commit writes the raw rows of
all (one `raw` commit), the valid episodes' steps, video and markers, then the quarantine rows
of all (one `quarantine` commit). A flood of N bad messages costs a few commits per group, not
2N. Only then are their acks sent, their events written and their keys' held positions released
(through `dropped`, cleared by each key's timer).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pi_format import Ack, AckStatus, QuarantineReason

from pi_jobs.stream import _metrics as metrics
from pi_jobs.stream._retry import with_retries

log = logging.getLogger("pi_jobs.stream")

# A message read this soon after its Kafka timestamp had nothing queued behind it (see
# GroupCommits._caught_up): 200 ms, the default group delay; the messages of a queued burst are
# read seconds after they were sent.
CAUGHT_UP_MS = 200


@dataclass(slots=True)
class Waiting:
    """One complete, featurized episode waiting for the next group commit."""

    rows: Any  # pi_format.lake.EpisodeRows
    attempt_id: str
    raw: pa.Table
    published_at_ns: int | None = None  # Kafka timestamp of the attempt's latest chunk
    size_bytes: int = 0  # bytes of its messages, counted against the limits (pi_jobs.stream.limits)


@dataclass(slots=True)
class Refused:
    """One quarantine (a message or an episode attempt) waiting for the next group commit."""

    key: str  # the Flink key its held positions are under (NO_KEY for a message without a key)
    episode_id: str | None
    attempt_id: str
    reason: QuarantineReason
    details: str
    raw: pa.Table  # its raw rows, written in the group's raw commit
    row: pa.Table  # its quarantine row, written in the group's quarantine commit
    offsets: str  # its Kafka offsets, for the event
    ack: bool  # a `quarantined` ack once committed (complete episodes only)
    size_bytes: int = 0  # Arrow bytes it holds, counted against max_held_bytes


class GroupCommits:
    """Commits `self.waiting` as one group (see the module doc)."""

    settings: Any  # SinkSettings
    writer: Any  # pi_format.lake.LakeWriter
    acks: Any  # pi_jobs.stream._acks.AckPublisher
    events: Any  # pi_jobs.stream._events.SinkEvents
    catalog: Any
    progress: dict[str, Any]
    waiting: list[Waiting]
    refused: list[Refused]
    waiting_since_ms: int
    last_input_ms: int  # processing time at which the latest message was done with
    flushing: int
    settled: set[str]
    dropped: set[str]

    # provided by EpisodeSinkFunction (declared here for the type checker)
    def _open_writer(self) -> None:
        raise NotImplementedError

    def _fault_injection(self, stage: str) -> None:
        raise NotImplementedError

    def _event(self, event: str, episode_id: str | None, attempt_id: str | None, **fields: Any) -> None:
        raise NotImplementedError

    def _reopen_catalog(self) -> None:
        self.catalog = None  # the next record opens a new client

    def _max_wait_ms(self) -> int:
        """How long the oldest of a group may wait while messages keep coming (never less than
        the quiet delay, so a long delay is not cut short under load)."""
        return max(self.settings.group_commit_max_wait_ms, self.settings.group_commit_delay_ms)

    def _group_due_ms(self) -> int:
        """When the waiting group is due if no message comes meanwhile: the input quiet for the
        delay, or its oldest at the longest wait, whichever is first."""
        return min(
            self.last_input_ms + self.settings.group_commit_delay_ms,
            self.waiting_since_ms + self._max_wait_ms(),
        )

    def _quiet(self, now_ms: int) -> bool:
        """Whether no message came for the group delay: the input is drained."""
        return now_ms - self.last_input_ms >= self.settings.group_commit_delay_ms

    def _caught_up(self, started_ms: int, published_at_ns: int | None) -> bool:
        """Whether a message was read within CAUGHT_UP_MS (or the delay, if shorter) of its Kafka
        timestamp: nothing was queued behind it then, so its episode need not wait for a burst
        that is not there (an episode sent alone commits right after its featurize, as fresh as
        before). Fixed, not the delay: a long delay (seconds) would call a backlog caught up."""
        if published_at_ns is None:
            return False
        lag_ms = started_ms - published_at_ns // 1_000_000
        return lag_ms <= min(CAUGHT_UP_MS, self.settings.group_commit_delay_ms)

    def _maybe_flush(self, now_ms: int, *, drained: bool) -> bool:
        """Commit the waiting group when it is full, when the input is `drained` (quiet for the
        delay, or the latest message was caught up), or when its oldest episode waited the
        longest wait. A burst of queued messages arrives a few ms apart, so under load groups
        grow until full or the longest wait instead of committing each episode alone (a timer
        due between two episodes of a busy worker fires after the next one's messages are in)."""
        if not self.waiting and not self.refused:
            return False
        full = len(self.waiting) + len(self.refused) >= self.settings.group_commit_max_episodes
        if not (full or drained or now_ms - self.waiting_since_ms >= self._max_wait_ms()):
            return False
        self.flushing = len(self.waiting) + len(self.refused)
        self._fault_injection("group_due")  # tests: a worker lost while it holds a whole group
        self._flush()
        return True

    def _in_group(self, key: str) -> bool:
        """Whether the waiting group holds an episode or a quarantine under `key`."""
        return any(w.rows.episode_id == key for w in self.waiting) or any(r.key == key for r in self.refused)

    def _flush(self) -> None:
        group, self.waiting = self.waiting, []
        refused, self.refused = self.refused, []
        self.flushing = len(group) + len(refused)
        raw = pa.concat_tables([w.raw for w in group] + [r.raw for r in refused])
        if group:
            self._commit_group(group, raw)
        elif raw.num_rows:
            self.writer.write_raw(raw)
        if refused:
            self._commit_refused(refused)

    def _commit_refused(self, refused: list[Refused]) -> None:
        """Their quarantine rows in one commit (their raw rows are in already), then what follows
        a quarantine: counts, events, acks, and the release of their keys' held positions."""
        self.writer.write_quarantine(pa.concat_tables([r.row for r in refused]))
        now = time.time_ns()
        for r in refused:
            self.progress["quarantined"] += 1
            metrics.QUARANTINED.labels(r.reason.value).inc()
            self._event(
                "quarantined",
                r.episode_id,
                r.attempt_id,
                level=logging.WARNING,
                reason=r.reason.value,
                details=r.details[:500],
                offsets=r.offsets,
            )
            log.warning("quarantined %s: [%s] %s", r.episode_id or "<no id>", r.reason.value, r.details)
            if r.ack and r.episode_id is not None:
                self.acks.send(Ack(r.episode_id, AckStatus.QUARANTINED, r.attempt_id, now, r.reason.value))
            # their held positions are cleared by their keys' timers (state is per key)
            self.dropped.add(r.key)

    def _commit_group(self, group: list[Waiting], raw: pa.Table) -> None:
        started = time.monotonic()
        # an object store that is down for a while (a restart) is waited for, not failed on
        result = with_retries(
            "lake commit",
            lambda: self.writer.commit_episodes([w.rows for w in group], raw=raw),
            retry_s=self.settings.dependency_retry_s,
            before_retry=self._open_writer,
        )
        lake_committed_ns = time.time_ns()
        if result.committed:
            self._record_in_catalog(result.episodes, result.version)
            published = {w.rows.episode_id: w.published_at_ns for w in group}
            with_retries(
                "catalog freshness record",
                lambda: self.events.group_committed(self._catalog(), result, published, lake_committed_ns),
                retry_s=self.settings.dependency_retry_s,
                before_retry=self._reopen_catalog,
            )
        metrics.record_commit(
            group, result, seconds=time.monotonic() - started, committed_at_ns=lake_committed_ns
        )
        # the attempts that were committed, from the markers themselves: when a re-send landed in
        # the same group as the original, the first copy is committed and the other is a duplicate
        attempts = dict(
            zip(
                result.episodes.column("episode_id").to_pylist(),
                result.episodes.column("attempt_id").to_pylist(),
                strict=True,
            )
        )
        now = time.time_ns()
        for eid in result.committed:
            self.acks.send(Ack(eid, AckStatus.COMMITTED, attempts[eid], now))
        self.progress["committed"] += len(result.committed)
        # their held positions are cleared by their keys' timers (state is per key)
        self.settled.update(result.committed)
        self.settled.update(result.duplicates)
        for eid in result.duplicates:  # committed by another writer meanwhile (or twice in the group)
            self._duplicate(eid)

    def _duplicate(self, episode_id: str) -> None:
        """A re-send (or a replay) of an episode already in the lake: ack it again."""
        self.progress["duplicates"] += 1
        found = self.writer.committed_episode_row(episode_id)
        if found is None:  # committed_attempt said yes: the row cannot vanish (one writer, no deletes)
            raise RuntimeError(f"episode {episode_id} is marked committed but has no episodes row")
        row, version = found
        attempt = str(row.column("attempt_id")[0].as_py())
        log.info("duplicate upload of %s (committed as attempt %s): ack again", episode_id, attempt)
        self._event("duplicate", episode_id, attempt, episodes_version=int(version))
        # Recording again is idempotent, and repairs the catalog when a failure hit between the
        # Delta commit and the catalog update (the replay after the restart lands here).
        self._record_in_catalog(row, version)
        self.acks.send(Ack(episode_id, AckStatus.COMMITTED, attempt, time.time_ns()))

    def _catalog(self) -> Any:
        if self.catalog is None:
            from pi_catalog import Catalog

            self.catalog = Catalog(self.settings.catalog_path)
        return self.catalog

    def _record_in_catalog(self, episode_row: pa.Table, version: int) -> None:
        # The catalog is derived (decision 7): Delta is already committed here. A server that is
        # down is retried for a while (recording is idempotent); an error that outlasts it
        # surfaces (the job fails and restarts, the replay sees a duplicate) rather than being
        # hidden; `pilake` can rebuild the catalog from Delta.
        with_retries(
            "catalog record",
            lambda: self._catalog().record_episodes(episode_row, episodes_version=version),
            retry_s=self.settings.dependency_retry_s,
            before_retry=self._reopen_catalog,
        )
