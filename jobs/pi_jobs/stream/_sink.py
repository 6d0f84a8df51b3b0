"""The Python side of the stream job: the keyed lake sink that runs inside the Flink worker.

Kafka source -> key by episode -> **EpisodeSinkFunction**: chunk assembly, validation,
featurize, then a group commit (raw rows, steps, video, episodes markers, quarantine rows: one
Delta commit per table for up to `group_commit_max_episodes` episodes or quarantines, committed
once the input has been quiet for `group_commit_delay_ms` or the oldest waited
`group_commit_max_wait_ms`), catalog update, end-to-end acks, progress file.
Each parallel subtask is its own lake writer (`writer_id` = group id + subtask index) and
writes its own progress file.

PyFlink has no Python sink API, so the sink is a KeyedProcessFunction that emits nothing.
This module is imported by the Python worker process; everything it needs travels in the
picklable `SinkSettings` (pi_jobs.stream._sink_settings). The group commit itself is
pi_jobs.stream._group_commit; what the sink holds in memory is recoverable after a restore
through the Kafka positions it keeps in Flink state (pi_jobs.stream._held).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
import traceback
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pi_format import (
    LakeLayout,
    ProtocolError,
    QuarantineReason,
)
from pyflink.datastream import KeyedProcessFunction, RuntimeContext

from pi_jobs.stream import _metrics as metrics
from pi_jobs.stream._acks import AckPublisher
from pi_jobs.stream._events import SinkEvents, offset_ranges
from pi_jobs.stream._group_commit import GroupCommits, Refused, Waiting
from pi_jobs.stream._held import held_positions_descriptor, lone_position, refetch, split_held
from pi_jobs.stream._held_limits import HeldLimits
from pi_jobs.stream._keying import key_matches
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
from pi_jobs.stream._sink_settings import SinkSettings
from pi_jobs.stream.contract import check_episode, load_registry
from pi_jobs.stream.featurize import featurize

log = logging.getLogger("pi_jobs.stream")

# Fault injection (tests only): the worker exits at this LakeWriter stage ("rows_written",
# "committed"), once per marker file, optionally only in one subtask. A real process death.
CRASH_AT_ENV = "PILAKE_FAULT_CRASH_AT"
# Timers due at a restore fire at once, but a loaded worker may run them a little late.
RECOVERY_SLACK_MS = 30_000
CRASH_MARKER_ENV = "PILAKE_FAULT_CRASH_MARKER"
CRASH_SUBTASK_ENV = "PILAKE_FAULT_CRASH_SUBTASK"
# Fault injection (tests only): featurizing the episode with this id raises, as a bug on its data
# would; the sink must quarantine it as sink_error and carry on (format/SPEC.md 9.5).
RAISE_FOR_ENV = "PILAKE_FAULT_RAISE_FOR_EPISODE"


@dataclass(slots=True)
class _Pending:
    """One episode being collected (held in the worker's memory, see EpisodeSinkFunction)."""

    attempt_id: str
    assembler: Any  # pi_format.wire.EpisodeAssembler
    messages: list[SourceMessage] = field(default_factory=list)
    last_chunk_ms: int = 0  # processing time of the latest chunk (the incomplete timeout's start)
    positions: set[tuple[int, int]] = field(default_factory=set)  # (partition, offset) of messages
    timer_ms: int = 0  # when its incomplete-timeout timer fires (deleted when it completes)
    size_bytes: int = 0  # bytes of the messages held (what the limits count, see _limits)


def _error_text(err: BaseException) -> str:
    """An unexpected exception as a quarantine reason's details: type, message, where."""
    frames = traceback.extract_tb(err.__traceback__)[-3:]
    where = " <- ".join(f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in reversed(frames))
    return f"{type(err).__name__}: {str(err)[:500]} (at {where})"


def subtask_index(runtime_context: RuntimeContext) -> int:
    """This sink subtask's index. PyFlink 2.0's thread mode (PEMJA) asks Flink's Java
    RuntimeContext for getIndexOfThisSubtask, which Flink 2.0 moved to getTaskInfo(): it raises
    AttributeError there, so the index is read from the task info instead."""
    try:
        return int(runtime_context.get_index_of_this_subtask())
    except AttributeError:
        java_context = runtime_context._runtime_context
        return int(java_context.getTaskInfo().getIndexOfThisSubtask())


class EpisodeSinkFunction(GroupCommits, HeldLimits, KeyedProcessFunction):
    """Keyed by episode_id: assemble, validate, featurize, commit, ack.

    Partial episodes, and complete ones waiting for their group commit, are kept in this
    instance's memory (keyed by episode_id), not in Flink keyed state: serializing megabytes of
    chunks into state on every message is slow. Their Kafka positions are in keyed state
    (pi_jobs.stream._held): after a restore from a checkpoint that moved the source past them,
    the key's next message or timer reads them from Kafka again, so Flink's recovery alone
    delivers every episode, without the uploader's re-send. A replay of what the checkpoint did
    not cover is harmless (architecture decision 3).
    """

    def __init__(self, settings: SinkSettings) -> None:
        self.settings = settings

    # -- lifecycle -------------------------------------------------------------------------
    def open(self, runtime_context: RuntimeContext) -> None:
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
        self.subtask = subtask_index(runtime_context)
        # one file per subtask; the driver adds them up (pi_jobs.stream._progress)
        self._progress_file = subtask_progress_file(self.settings.progress_path, self.subtask)
        self.progress = load_progress(self._progress_file)
        # metrics first: a restart while the object store is still down waits for it in the
        # lake open below, and the worker serves its retries meanwhile (PilakeStreamStalled),
        # not nothing (none answered 270 scrapes of a recorded 380 s outage: PilakeStreamJobDown)
        if self.settings.metrics_ports is not None:
            metrics.start_worker_metrics(
                self.settings.metrics_ports,
                subtask=self.subtask,
                bootstrap_servers=self.settings.bootstrap_servers,
                topic=self.settings.raw_topic,
                client_options=self.settings.client_options,
                offsets=lambda: self.progress["offsets"],
            )
        with_retries("lake open", self._open_writer, retry_s=self.settings.dependency_retry_s)
        self.acks = AckPublisher(
            self.settings.bootstrap_servers, self.settings.ack_topic, self.settings.client_options
        )
        self.catalog: Any = None
        self.pending: dict[str, _Pending] = {}
        # Kafka positions of the messages held under the current key (see _held)
        self.held: Any = runtime_context.get_list_state(held_positions_descriptor())
        self.settled: set[str] = set()  # committed here; their held positions not yet cleared
        # quarantined while another key was current (a limit); their held positions not yet cleared
        self.dropped: set[str] = set()
        self.limits = self.settings.limits
        self.peak_held_bytes = 0
        # Until then a new episode's first message checks its key for positions held before a
        # restore (a state read): by then every restored key's own timer has fired (each held
        # episode has one due within the incomplete timeout or the group delay) and
        # recovered it, so later episodes skip the read.
        self.recover_on_message_until_ms = (
            int(time.time() * 1000)
            + self.settings.incomplete_timeout_ms
            + max(self.settings.group_commit_delay_ms, self.settings.group_commit_max_wait_ms)
            + RECOVERY_SLACK_MS
        )
        self.waiting: list[Waiting] = []
        self.refused: list[Refused] = []  # quarantines waiting for the group commit
        self.waiting_since_ms = 0
        self.last_input_ms = 0  # when the latest message was done with (the group's quiet time)
        self.flushing = 0  # episodes in the group commit under way (for fault reports)
        self.registry = self.settings.registry or load_registry(None)
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

    def close(self) -> None:
        try:
            acks = getattr(self, "acks", None)
            if acks is not None:
                acks.flush(10)
        finally:
            if self.settings.metrics_ports is not None:  # its lag consumer would outlive the sink
                metrics.stop_worker_metrics()

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
        held = self._held_bytes()
        self.peak_held_bytes = max(self.peak_held_bytes, held)
        self.progress["held_bytes"] = held
        self.progress["peak_held_bytes"] = max(int(self.progress.get("peak_held_bytes", 0)), held)
        metrics.HELD_BYTES.set(held)
        metrics.HELD_EPISODES.set(len(self.pending) + len(self.waiting) + len(self.refused))
        write_progress(
            self._progress_file,
            self.progress,
            incomplete=len(self.pending),
            buffered=len(self.waiting) + len(self.refused),  # quarantines wait for the group too
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
        key: str,
        ctx: Any = None,
        now_ms: int | None = None,
    ) -> None:
        """Quarantine into the waiting group (pi_jobs.stream._group_commit): its raw rows and its
        quarantine row are committed with the group, its ack and event follow the commit. With
        `ctx` (the current key is `key`) a timer under `key` bounds its wait and clears its held
        positions after the commit; without it (another key) that key's own timer does."""
        why = err.reason if err is not None else reason
        if why is None:
            raise TypeError("_quarantine needs err or reason")
        text = err.detail if err is not None else details
        raw = raw_rows(messages, attempt_id, [m.chunk_index for m in messages])
        row = quarantine_row(
            episode_id=episode_id,
            reason=why,
            details=text,
            messages=messages,
            attempt_id=attempt_id,
            size_bytes=size_bytes,
        )
        now = int(time.time() * 1000) if now_ms is None else now_ms
        if not self.waiting and not self.refused:
            self.waiting_since_ms = now
        self.refused.append(
            Refused(
                key,
                episode_id,
                attempt_id,
                why,
                text,
                raw,
                row,
                offset_ranges(messages),
                ack,
                raw.nbytes + row.nbytes,
            )
        )
        if ctx is not None:
            ctx.timer_service().register_processing_time_timer(now + self.settings.group_commit_delay_ms)
        if self._held_bytes() > self.limits.max_held_bytes:  # e.g. a run of refused large episodes
            self._flush()

    # -- per message -----------------------------------------------------------------------
    def process_element(self, value: Any, ctx: KeyedProcessFunction.Context) -> Iterator[Any]:
        key_bytes, payload, partition, offset = value[0], value[1], value[2], value[3]
        payload = bytes(payload) if payload is not None else b""
        key = ctx.get_current_key()
        if not key_matches(key, value):  # the JVM's key expression disagrees with episode_key:
            key = NO_KEY  # never committed under it; quarantined as a message without a usable key
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
        now_ms = int(ctx.timer_service().current_processing_time())
        # the input was quiet before this message: a group its timer has not committed yet
        # (the timer is on its way) commits now, without this message's episode
        self._maybe_flush(now_ms, drained=self._quiet(now_ms))
        self._accept(msg, ctx, now_ms, key_bytes=key_bytes, recovered=False)
        done_ms = int(ctx.timer_service().current_processing_time())
        # full, the oldest waited the longest wait, or nothing was queued behind this message
        self._maybe_flush(done_ms, drained=self._caught_up(now_ms, msg.published_at_ns))
        self.last_input_ms = done_ms
        self._write_progress()
        return iter(())

    def _accept(self, msg: SourceMessage, ctx: Any, now_ms: int, *, key_bytes: Any, recovered: bool) -> None:
        """One message into its episode; `recovered`: read again from Kafka after a restore
        (its position is already held in state)."""
        from pi_format.wire import EpisodeAssembler, decode_chunk, peek_episode_id

        payload = msg.value
        try:
            try:
                chunk = decode_chunk(payload)
            except ProtocolError:
                raise
            except Exception as err:  # a reader bug on these bytes: this message, not the job
                raise ProtocolError(QuarantineReason.SINK_ERROR, _error_text(err)) from err
            if msg.key is None:
                shown = "none" if not key_bytes else repr(bytes(key_bytes)[:64])
                raise ProtocolError(
                    QuarantineReason.KEY_MISMATCH,
                    f"message has no usable Kafka key ({shown}); chunk names {chunk.episode_id!r}",
                )
            # a declared count sizes nothing and is checked before it is used (decision 13)
            limit = self.limits.max_chunks_per_episode
            if chunk.chunk_count > limit:
                self._limit_acted("max_chunks_per_episode")
                raise ProtocolError(
                    QuarantineReason.LIMIT_EXCEEDED,
                    f"max_chunks_per_episode: chunk {chunk.chunk_index} declares chunk_count "
                    f"{chunk.chunk_count}, the stream job accepts at most {limit} "
                    "(pilake stream --max-chunks-per-episode)",
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
            if not recovered:  # held until its quarantine is committed (see _held)
                self.held.add(lone_position(msg.partition, msg.offset))
            self._quarantine(
                episode_id=eid,
                err=None,
                reason=err.reason,
                details=detail,
                messages=[msg],
                attempt_id=attempt_id,
                ack=False,
                size_bytes=len(payload),
                key=ctx.get_current_key(),
                ctx=ctx,
                now_ms=now_ms,
            )
            return

        pending = self.pending.get(msg.key)
        size = len(payload)
        if pending is not None and pending.size_bytes + size > self.limits.max_episode_bytes:
            # the episode outgrew its limit: all it holds, this message included, is quarantined
            del self.pending[msg.key]
            ctx.timer_service().delete_processing_time_timer(pending.timer_ms)
            msg.chunk_index = chunk.chunk_index
            pending.messages.append(msg)
            if not recovered:  # held with its episode's until their quarantine is committed
                self.held.add((msg.partition, msg.offset))
            self._refuse(
                pending,
                "max_episode_bytes",
                f"episode {msg.key} holds {pending.size_bytes + size} bytes in "
                f"{len(pending.messages)} messages, more than max_episode_bytes "
                f"{self.limits.max_episode_bytes} (pilake stream --max-episode-mb)",
                ctx=ctx,
                now_ms=now_ms,
            )
            return
        self._make_room(msg.key, size, new_episode=pending is None, now_ms=now_ms)
        if (
            pending is None
            and not recovered
            and now_ms < self.recover_on_message_until_ms
            and self._recover(msg.key, ctx, now_ms)
        ):
            pending = self.pending.get(msg.key)  # None when the recovered episode completed
        if pending is None:
            pending = _Pending(str(uuid.uuid4()), EpisodeAssembler(msg.key))
            self.pending[msg.key] = pending
            # One live timer per pending episode; on_timer re-arms it while chunks keep coming.
            pending.timer_ms = now_ms + self.settings.incomplete_timeout_ms
            ctx.timer_service().register_processing_time_timer(pending.timer_ms)
        position = (msg.partition, msg.offset)
        if position in pending.positions:  # already read back from Kafka by the recovery
            return
        pending.last_chunk_ms = now_ms
        try:
            try:
                # returns False for an identical duplicate chunk, which the assembler ignores
                pending.assembler.add(chunk)
            except ProtocolError:
                raise
            except Exception as unexpected:  # data-dependent: quarantine this message
                raise ProtocolError(QuarantineReason.SINK_ERROR, _error_text(unexpected)) from unexpected
        except ProtocolError as err:
            attempt_id = pending.attempt_id
            if not pending.assembler.chunks:  # nothing valid collected under this key yet
                del self.pending[msg.key]
            msg.chunk_index = chunk.chunk_index
            if not recovered:  # held until its quarantine is committed (see _held)
                self.held.add(lone_position(msg.partition, msg.offset))
            self._quarantine(
                episode_id=msg.key,
                err=err,
                messages=[msg],
                attempt_id=attempt_id,
                ack=False,
                key=msg.key,
                ctx=ctx,
                now_ms=now_ms,
            )
            return
        # Identical re-sent chunks are kept in raw too: every message gets a raw row.
        msg.chunk_index = chunk.chunk_index
        pending.messages.append(msg)
        pending.size_bytes += size
        pending.positions.add(position)
        if not recovered:
            self.held.add(position)
        if pending.assembler.is_complete:
            del self.pending[msg.key]
            # its group-commit timer takes over (each timer that fires costs a state read)
            ctx.timer_service().delete_processing_time_timer(pending.timer_ms)
            self._complete(pending, manifest_at_ns=msg.received_at_ns, ctx=ctx, now_ms=now_ms)

    def _recover(self, key: str, ctx: Any, now_ms: int) -> bool:
        """Assemble again what this key held when the worker was lost (see _held), into its
        pending episode if one has started since; False when nothing is missing from memory.
        Positions of an episode committed (or quarantined) since are cleared."""
        if self._in_group(key):  # its positions stay held until the group commit lands
            return False
        pending = self.pending.get(key)
        if key in self.settled:  # committed here: its held positions are obsolete
            self.settled.discard(key)
            self.held.clear()
            # A re-send under way since (its first chunk came before this key's timer cleared
            # the committed episode's positions): its own positions stay held. Not a duplicate
            # yet: it is one when it completes (_complete), counted and acked once there.
            if pending is not None:
                for position in sorted(pending.positions):
                    self.held.add(position)
            return False
        if key in self.dropped:  # quarantined over a limit: its held positions are obsolete
            self.dropped.discard(key)
            self.held.clear()
            if pending is not None:  # a new episode under the key since: its positions stay
                for position in sorted(pending.positions):
                    self.held.add(position)
            return False
        have = pending.positions if pending is not None else set()
        positions, lone = split_held(self.held.get() or ())
        positions = [p for p in positions if p not in have]
        if not positions:
            return False
        if self.writer.committed_attempt(key) is not None:  # committed before a restore
            self.held.clear()
            if pending is not None:  # a re-send under way: its own positions stay held
                for position in sorted(pending.positions):
                    self.held.add(position)
            # its ack (and catalog record) may not have happened before the worker was lost
            self._duplicate(key)
            if lone:  # messages refused on their own, maybe not quarantined yet: again
                self._reaccept(key, [p for p in positions if p in lone], ctx, now_ms, recovered=False)
            return False
        self._reaccept(key, positions, ctx, now_ms, recovered=True)
        return True

    def _reaccept(
        self, key: str, positions: list[tuple[int, int]], ctx: Any, now_ms: int, *, recovered: bool
    ) -> None:
        """Read the messages at `positions` of `key` from Kafka again and accept them anew."""
        found = refetch(
            bootstrap_servers=self.settings.bootstrap_servers,
            client_options=self.settings.client_options,
            topic=self.settings.raw_topic,
            key=key,
            positions=positions,
        )
        self.progress["recovered"] = int(self.progress.get("recovered", 0)) + 1
        self._event(
            "recovered",
            key,
            None,
            level=logging.WARNING if found.missing else logging.INFO,
            messages=len(found.messages),
            missing=[f"{p}:{o}" for p, o in found.missing[:20]],
        )
        log.info(
            "recovered %s after a restore: %d of %d held messages read again from Kafka",
            key,
            len(found.messages),
            len(positions),
        )
        for message in found.messages:
            if key == NO_KEY:
                message.key = None
            self._accept(message, ctx, now_ms, key_bytes=None, recovered=recovered)

    def on_timer(self, timestamp: int, ctx: KeyedProcessFunction.OnTimerContext) -> Iterator[Any]:
        """The incomplete timeout of one episode: quarantine it unless chunks came meanwhile.

        After a Flink restart timers are restored but `pending` (in memory) is not: a timer
        without a pending episode recovers what its key held (see _held), or clears the held
        positions of an episode committed since.
        """
        # Any timer is a chance to commit the waiting group (its delay timer may be one).
        now_ms = max(int(timestamp), int(ctx.timer_service().current_processing_time()))
        if self._maybe_flush(now_ms, drained=self._quiet(now_ms)):
            self._write_progress()
        key = ctx.get_current_key()
        pending = self.pending.get(key)
        if self._in_group(key):  # its group is not due yet (messages kept coming): look again
            ctx.timer_service().register_processing_time_timer(max(self._group_due_ms(), now_ms + 1))
        if pending is None:
            # held when the worker was lost (a key in the group keeps its positions held)
            if self._recover(key, ctx, int(timestamp)):
                self._maybe_flush(now_ms, drained=False)
                self._write_progress()
            return iter(())
        # a restored key whose messages resumed before its timer: complete it with what it held
        if self._recover(key, ctx, int(timestamp)) and key not in self.pending:
            self._maybe_flush(now_ms, drained=False)
            self._write_progress()
            return iter(())
        deadline_ms = pending.last_chunk_ms + self.settings.incomplete_timeout_ms
        if timestamp < deadline_ms:  # a chunk arrived since this timer was set
            pending.timer_ms = deadline_ms
            ctx.timer_service().register_processing_time_timer(deadline_ms)
            return iter(())
        del self.pending[key]
        self._time_out(pending, ctx, int(timestamp))  # its held positions go after the commit
        self._maybe_flush(now_ms, drained=self._quiet(now_ms))
        self._write_progress()
        return iter(())

    def _time_out(self, pending: _Pending, ctx: Any, now_ms: int) -> None:
        asm = pending.assembler
        messages = sorted(pending.messages, key=lambda m: (m.partition, m.offset))
        have = len(asm.chunks)
        # the first missing indexes, never a list sized from the declared count (decision 13)
        missing: list[int] = []
        i = 0
        while i < (asm.chunk_count or 0) and len(missing) <= 20:
            if i not in asm.chunks:
                missing.append(i)
            i += 1
        shown = f"{missing[:20]}{' ...' if len(missing) > 20 else ''}"
        self.progress["timed_out"] = int(self.progress.get("timed_out", 0)) + 1
        # No ack: the uploader re-sends an episode it got no ack for, and a full re-send can
        # still complete (and commit) it; the commit then closes this quarantine row.
        self._quarantine(
            episode_id=asm.episode_id,
            err=None,
            reason=QuarantineReason.INCOMPLETE_TIMEOUT,
            details=(
                f"episode {asm.episode_id} has {have} of {asm.chunk_count} chunks after "
                f"{self.settings.incomplete_timeout_ms / 1000:g} s without a new chunk; missing {shown}"
            ),
            messages=messages,
            attempt_id=pending.attempt_id,
            ack=False,
            key=asm.episode_id,
            ctx=ctx,
            now_ms=now_ms,
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
            if not self._in_group(eid):  # else a quarantine of the key waits: cleared after it
                self.held.clear()
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
            if os.environ.get(RAISE_FOR_ENV) == eid:
                raise RuntimeError(f"fault injection: {RAISE_FOR_ENV}={eid}")
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
            self._quarantine(
                episode_id=eid,
                err=err,
                messages=messages,
                attempt_id=pending.attempt_id,
                ack=True,
                key=eid,
                ctx=ctx,
                now_ms=now_ms,
            )
            return
        except Exception as err:
            # Data-dependent (assembly, checks and featurize do no I/O): this episode is
            # quarantined with the exception, the job carries on. Lake or catalog failures
            # happen in the writes around this block and still fail the task (then retry).
            log.exception("sink error on %s: quarantined", eid)
            self._quarantine(
                episode_id=eid,
                err=None,
                reason=QuarantineReason.SINK_ERROR,
                details=f"the stream job failed on this episode: {_error_text(err)}",
                messages=messages,
                attempt_id=pending.attempt_id,
                ack=True,
                key=eid,
                ctx=ctx,
                now_ms=now_ms,
            )
            return
        self._event("validated", eid, pending.attempt_id, steps=int(episode.step_count))
        if not self.waiting and not self.refused:
            self.waiting_since_ms = now_ms
        # The delay bound: a timer that flushes the group. Under each episode's own key, so that
        # it also clears the episode's held positions once committed, or recovers the episode
        # after a restore (restored timers that are due fire at once).
        ctx.timer_service().register_processing_time_timer(now_ms + self.settings.group_commit_delay_ms)
        self.waiting.append(
            Waiting(featurized, pending.attempt_id, raw, max(published, default=None), pending.size_bytes)
        )

    def _event(self, event: str, episode_id: str | None, attempt_id: str | None, **fields: Any) -> None:
        self.events.emit(event, episode_id, attempt_id, **fields)
