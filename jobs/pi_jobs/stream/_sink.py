"""The Python side of the stream job: the keyed lake sink that runs inside the Flink worker.

Kafka source -> key by episode -> **EpisodeSinkFunction**: chunk assembly, validation,
featurize, then a group commit (raw rows, steps, video, episodes markers: one Delta commit per
table for up to `group_commit_max_episodes` episodes or `group_commit_delay_ms`, whichever comes
first), catalog update, end-to-end acks, progress file. Each parallel subtask is its own lake
writer (`writer_id` = group id + subtask index) and writes its own progress file.

PyFlink has no Python sink API, so the sink is a KeyedProcessFunction that emits nothing.
This module is imported by the Python worker process; everything it needs travels in the
picklable `SinkSettings`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
from pi_format import (
    Ack,
    AckStatus,
    LakeLayout,
    ProtocolError,
    QuarantineReason,
)
from pyflink.datastream import KeyedProcessFunction, RuntimeContext

from pi_jobs.stream import _metrics as metrics
from pi_jobs.stream._acks import AckPublisher
from pi_jobs.stream._events import SinkEvents, offset_ranges
from pi_jobs.stream._progress import load_progress, subtask_progress_file, write_progress
from pi_jobs.stream._records import (
    NO_KEY,
    OVERSIZE_KEEP_BYTES,
    SourceMessage,
    quarantine_row,
    raw_rows,
    record_time_ns,
)
from pi_jobs.stream._retry import with_retries
from pi_jobs.stream.contract import RobotRegistry, check_episode, load_registry
from pi_jobs.stream.featurize import FeaturizeConfig, featurize

log = logging.getLogger("pi_jobs.stream")

# Default of SinkSettings.incomplete_timeout_ms (see StreamJobConfig.incomplete_timeout_s).
DEFAULT_INCOMPLETE_TIMEOUT_MS = 60_000
# Fault injection (tests only): the worker exits at this LakeWriter stage ("rows_written",
# "committed"), once per marker file, optionally only in one subtask. A real process death.
CRASH_AT_ENV = "PILAKE_FAULT_CRASH_AT"
CRASH_MARKER_ENV = "PILAKE_FAULT_CRASH_MARKER"
CRASH_SUBTASK_ENV = "PILAKE_FAULT_CRASH_SUBTASK"


@dataclass(frozen=True, slots=True)
class SinkSettings:
    """What the worker-side sink needs; pickled into the Flink job."""

    bootstrap_servers: str
    lake_root: str
    catalog_path: str
    raw_topic: str
    ack_topic: str
    progress_path: str
    featurize: FeaturizeConfig
    # Kafka security settings (SASL passwords): kept out of the repr so they are never logged.
    client_options: Mapping[str, str] = field(default_factory=dict, repr=False)
    # The robot registry the contract checks against; None: the one shipped with pi_jobs.
    registry: RobotRegistry | None = None
    # An episode with no new chunk for this long (processing time) is quarantined as
    # incomplete_timeout; its chunks are kept in raw.
    incomplete_timeout_ms: int = DEFAULT_INCOMPLETE_TIMEOUT_MS
    # Group commit bounds (SPEC.md §7.8): commit when this many episodes are waiting, or when
    # the oldest has waited this long (StreamJobConfig says why 200 ms).
    group_commit_max_episodes: int = 32
    group_commit_delay_ms: int = 200
    # Writer identities are f"{writer_prefix}-{subtask index}" (unique per job and subtask).
    writer_prefix: str = "pilake-stream"
    # JSON event logs (pi_format.jsonlog, read by `pilake trace`): one file per worker process
    # in this directory; "" = none.
    event_log_dir: str = ""
    # Prometheus /metrics of each worker on the first free port of [first, last]; None = off.
    metrics_ports: tuple[int, int] | None = None
    # How long a lake commit or catalog record is retried while its server is unreachable
    # (pi_jobs.stream._retry); StreamJobConfig.dependency_retry_s says why 120 s.
    dependency_retry_s: float = 120.0


@dataclass(slots=True)
class _Pending:
    """One episode being collected (held in the worker's memory, see EpisodeSinkFunction)."""

    attempt_id: str
    assembler: Any  # pi_format.wire.EpisodeAssembler
    messages: list[SourceMessage] = field(default_factory=list)
    last_chunk_ms: int = 0  # processing time of the latest chunk (the incomplete timeout's start)


@dataclass(slots=True)
class _Waiting:
    """One complete, featurized episode waiting for the next group commit."""

    rows: Any  # pi_format.lake.EpisodeRows
    attempt_id: str
    raw: pa.Table
    published_at_ns: int | None = None  # Kafka timestamp of the attempt's latest chunk


class EpisodeSinkFunction(KeyedProcessFunction):
    """Keyed by episode_id: assemble, validate, featurize, commit, ack.

    Partial episodes are kept in this instance's memory (a dict keyed by episode_id), not in
    Flink keyed state: serializing megabytes of chunks into state on every message is slow.
    A crash therefore loses the partial episodes; the source rewinds to the last checkpoint,
    and for chunks older than that the uploader's end-to-end ack (it re-sends an episode whose
    ack never came) recovers them. That is by design (architecture decision 3 makes the replay
    harmless).
    """

    def __init__(self, settings: SinkSettings) -> None:
        self.settings = settings

    # -- lifecycle -------------------------------------------------------------------------
    def open(self, runtime_context: RuntimeContext) -> None:
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
        self.subtask = int(runtime_context.get_index_of_this_subtask())
        # a restart while the object store is still down waits for it here too
        with_retries("lake open", self._open_writer, retry_s=self.settings.dependency_retry_s)
        self.acks = AckPublisher(
            self.settings.bootstrap_servers, self.settings.ack_topic, self.settings.client_options
        )
        self.catalog: Any = None
        self.pending: dict[str, _Pending] = {}
        self.waiting: list[_Waiting] = []
        self.waiting_since_ms = 0
        self.flushing = 0  # episodes in the group commit under way (for fault reports)
        self.registry = self.settings.registry or load_registry(None)
        # one file per subtask; the driver adds them up (pi_jobs.stream._progress)
        self._progress_file = subtask_progress_file(self.settings.progress_path, self.subtask)
        self.progress = load_progress(self._progress_file)
        if self.settings.metrics_ports is not None:
            metrics.start_worker_metrics(
                self.settings.metrics_ports,
                subtask=self.subtask,
                bootstrap_servers=self.settings.bootstrap_servers,
                topic=self.settings.raw_topic,
                client_options=self.settings.client_options,
                offsets=lambda: self.progress["offsets"],
            )
        self.events = SinkEvents(self.subtask, self.settings.event_log_dir)  # JSON lines: pilake trace

    def _open_writer(self) -> None:
        """A fresh LakeWriter: it reads the lake's state (what this writer already committed), as
        at a restart, so a commit retried after a failure commits only what is missing."""
        from pi_format.lake import LakeWriter

        self.writer = LakeWriter(
            LakeLayout(self.settings.lake_root),
            writer_id=f"{self.settings.writer_prefix}-{self.subtask}",
            on_stage=self._fault_injection,
        )

    def _reopen_catalog(self) -> None:
        self.catalog = None  # the next record opens a new client

    def close(self) -> None:
        acks = getattr(self, "acks", None)
        if acks is not None:
            acks.flush(10)

    def _fault_injection(self, stage: str) -> None:
        wanted = os.environ.get(CRASH_AT_ENV)
        if wanted != stage:
            return
        only = os.environ.get(CRASH_SUBTASK_ENV)
        if only is not None and int(only) != self.subtask:
            return
        marker = Path(os.environ.get(CRASH_MARKER_ENV, ""))
        if not marker.name or marker.exists():
            return
        marker.write_text(
            json.dumps({"subtask": self.subtask, "stage": stage, "group_episodes": self.flushing})
        )
        log.warning("fault injection: subtask %d exits at %s", self.subtask, stage)
        os._exit(137)

    # -- progress --------------------------------------------------------------------------
    def _write_progress(self) -> None:
        write_progress(
            self._progress_file, self.progress, incomplete=len(self.pending), buffered=len(self.waiting)
        )

    # -- outputs ---------------------------------------------------------------------------
    def _quarantine(
        self,
        *,
        episode_id: str | None,
        err: ProtocolError | None,
        reason: QuarantineReason | None = None,
        details: str = "",
        messages: list[SourceMessage],
        attempt_id: str,
        ack: bool,
        size_bytes: int | None = None,
    ) -> None:
        why = err.reason if err is not None else reason
        if why is None:
            raise TypeError("_quarantine needs err or reason")
        text = err.detail if err is not None else details
        self.writer.write_quarantine(
            quarantine_row(
                episode_id=episode_id,
                reason=why,
                details=text,
                messages=messages,
                attempt_id=attempt_id,
                size_bytes=size_bytes,
            )
        )
        self.progress["quarantined"] += 1
        metrics.QUARANTINED.labels(why.value).inc()
        self._event(
            "quarantined",
            episode_id,
            attempt_id,
            level=logging.WARNING,
            reason=why.value,
            details=text[:500],
            offsets=offset_ranges(messages),
        )
        log.warning("quarantined %s: [%s] %s", episode_id or "<no id>", why.value, text)
        if ack and episode_id is not None:
            self.acks.send(Ack(episode_id, AckStatus.QUARANTINED, attempt_id, time.time_ns(), why.value))

    # -- per message -----------------------------------------------------------------------
    def process_element(self, value: Any, ctx: KeyedProcessFunction.Context) -> Iterator[Any]:
        from pi_format.wire import EpisodeAssembler, decode_chunk, peek_episode_id

        key_bytes, payload, partition, offset = value[0], value[1], value[2], value[3]
        payload = bytes(payload) if payload is not None else b""
        key = ctx.get_current_key()
        msg = SourceMessage(
            topic=self.settings.raw_topic,
            partition=int(partition),
            offset=int(offset),
            received_at_ns=time.time_ns(),
            key=None if key == NO_KEY else key,
            value=payload,
            published_at_ns=record_time_ns(value[4]) if len(value) > 4 else None,
        )
        p = self.progress
        p["messages"] += 1
        p["bytes"] += len(payload)
        metrics.MESSAGES_IN.inc()
        metrics.BYTES_IN.inc(len(payload))
        offsets: dict[str, int] = p["offsets"]
        offsets[str(msg.partition)] = max(offsets.get(str(msg.partition), -1), msg.offset)

        try:
            chunk = decode_chunk(payload)
            if msg.key is None:
                shown = "none" if not key_bytes else repr(bytes(key_bytes)[:64])
                raise ProtocolError(
                    QuarantineReason.KEY_MISMATCH,
                    f"message has no usable Kafka key ({shown}); chunk names {chunk.episode_id!r}",
                )
        except ProtocolError as err:
            # A single message that cannot be used: keep its bytes and say why; the episode it
            # may belong to carries on (and completes if the message is re-sent intact).
            attempt_id = str(uuid.uuid4())
            eid = msg.key or peek_episode_id(payload)
            detail = err.detail
            if err.reason is QuarantineReason.OVERSIZE:
                detail += (
                    f"; sha256 {hashlib.sha256(payload).hexdigest()}; raw keeps the first "
                    f"{OVERSIZE_KEEP_BYTES} bytes"
                )
                msg.value = payload[:OVERSIZE_KEEP_BYTES]
            self.writer.write_raw(raw_rows([msg], attempt_id, [None]))
            self._quarantine(
                episode_id=eid,
                err=None,
                reason=err.reason,
                details=detail,
                messages=[msg],
                attempt_id=attempt_id,
                ack=False,
                size_bytes=len(payload),
            )
            self._write_progress()
            return iter(())

        now_ms = int(ctx.timer_service().current_processing_time())
        pending = self.pending.get(msg.key)
        if pending is None:
            pending = _Pending(str(uuid.uuid4()), EpisodeAssembler(msg.key))
            self.pending[msg.key] = pending
            # One live timer per pending episode; on_timer re-arms it while chunks keep coming.
            ctx.timer_service().register_processing_time_timer(now_ms + self.settings.incomplete_timeout_ms)
        pending.last_chunk_ms = now_ms
        try:
            # returns False for an identical duplicate chunk, which the assembler ignores
            pending.assembler.add(chunk)
        except ProtocolError as err:
            attempt_id = pending.attempt_id
            if not pending.assembler.chunks:  # nothing valid collected under this key yet
                del self.pending[msg.key]
            self.writer.write_raw(raw_rows([msg], attempt_id, [chunk.chunk_index]))
            self._quarantine(episode_id=msg.key, err=err, messages=[msg], attempt_id=attempt_id, ack=False)
            self._write_progress()
            return iter(())
        # Identical re-sent chunks are kept in raw too: every message gets a raw row.
        msg.chunk_index = chunk.chunk_index
        pending.messages.append(msg)
        if pending.assembler.is_complete:
            del self.pending[msg.key]
            self._complete(pending, manifest_at_ns=msg.received_at_ns, ctx=ctx, now_ms=now_ms)
        self._maybe_flush(now_ms)
        self._write_progress()
        return iter(())

    def on_timer(self, timestamp: int, ctx: KeyedProcessFunction.OnTimerContext) -> Iterator[Any]:
        """The incomplete timeout of one episode: quarantine it unless chunks came meanwhile.

        After a Flink restart timers are restored but `pending` (in memory) is not: a timer
        without a pending episode does nothing.
        """
        # Any timer is a chance to commit the waiting group (its delay timer may be one).
        if self._maybe_flush(int(timestamp)):
            self._write_progress()
        key = ctx.get_current_key()
        pending = self.pending.get(key)
        if pending is None:
            return iter(())
        deadline_ms = pending.last_chunk_ms + self.settings.incomplete_timeout_ms
        if timestamp < deadline_ms:  # a chunk arrived since this timer was set
            ctx.timer_service().register_processing_time_timer(deadline_ms)
            return iter(())
        del self.pending[key]
        self._time_out(pending)
        self._write_progress()
        return iter(())

    def _time_out(self, pending: _Pending) -> None:
        asm = pending.assembler
        messages = sorted(pending.messages, key=lambda m: (m.partition, m.offset))
        self.writer.write_raw(raw_rows(messages, pending.attempt_id, [m.chunk_index for m in messages]))
        have = sorted(asm.chunks)
        missing = [i for i in range(asm.chunk_count or 0) if i not in asm.chunks]
        shown = f"{missing[:20]}{' ...' if len(missing) > 20 else ''}"
        self.progress["timed_out"] = int(self.progress.get("timed_out", 0)) + 1
        # No ack: the uploader re-sends an episode it got no ack for, and a full re-send can
        # still complete (and commit) it; the commit then closes this quarantine row.
        self._quarantine(
            episode_id=asm.episode_id,
            err=None,
            reason=QuarantineReason.INCOMPLETE_TIMEOUT,
            details=(
                f"episode {asm.episode_id} has {len(have)} of {asm.chunk_count} chunks after "
                f"{self.settings.incomplete_timeout_ms / 1000:g} s without a new chunk; missing {shown}"
            ),
            messages=messages,
            attempt_id=pending.attempt_id,
            ack=False,
        )

    def _complete(self, pending: _Pending, *, manifest_at_ns: int, ctx: Any, now_ms: int) -> None:
        asm = pending.assembler
        eid: str = asm.episode_id
        metrics.EPISODES_IN.inc()
        messages = sorted(pending.messages, key=lambda m: (m.partition, m.offset))
        # Raw (bronze) first: what arrived is kept even if it is rejected below (decision 2).
        raw = raw_rows(messages, pending.attempt_id, [m.chunk_index for m in messages])
        if self.writer.committed_attempt(eid) is not None:
            self.writer.write_raw(raw)
            self._duplicate(eid)
            return
        raw_size = int(asm.size_bytes)  # distinct chunks only
        published = [m.published_at_ns for m in messages if m.published_at_ns is not None]
        self._event(
            "received",
            eid,
            pending.attempt_id,
            chunks=len(messages),
            bytes=raw_size,
            published_at_ns=max(published, default=None),
            offsets=offset_ranges(messages),
        )
        try:
            episode = asm.assemble()
            check_episode(episode, self.registry)
            featurized = featurize(
                episode,
                attempt_id=pending.attempt_id,
                received_at_ns=manifest_at_ns,
                raw_size_bytes=raw_size,
                committed_at_ns=time.time_ns(),
                config=self.settings.featurize,
            )
        except ProtocolError as err:
            self.writer.write_raw(raw)
            self._quarantine(
                episode_id=eid, err=err, messages=messages, attempt_id=pending.attempt_id, ack=True
            )
            return
        self._event("validated", eid, pending.attempt_id, steps=int(episode.step_count))
        if not self.waiting:
            self.waiting_since_ms = now_ms
            # the delay bound: a timer (under this episode's key) that flushes the group
            ctx.timer_service().register_processing_time_timer(now_ms + self.settings.group_commit_delay_ms)
        self.waiting.append(_Waiting(featurized, pending.attempt_id, raw, max(published, default=None)))

    def _maybe_flush(self, now_ms: int) -> bool:
        """Commit the waiting group when it is full or its oldest episode waited long enough."""
        if not self.waiting:
            return False
        full = len(self.waiting) >= self.settings.group_commit_max_episodes
        if not full and now_ms - self.waiting_since_ms < self.settings.group_commit_delay_ms:
            return False
        self._flush()
        return True

    def _flush(self) -> None:
        group, self.waiting = self.waiting, []
        self.flushing = len(group)
        started = time.monotonic()
        raw = pa.concat_tables([w.raw for w in group])
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
        for eid in result.duplicates:  # committed by another writer meanwhile (or twice in the group)
            self._duplicate(eid)

    def _event(self, event: str, episode_id: str | None, attempt_id: str | None, **fields: Any) -> None:
        self.events.emit(event, episode_id, attempt_id, **fields)

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
