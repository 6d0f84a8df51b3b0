"""The stream sink's limits in action (a mixin of pi_jobs.stream._sink.EpisodeSinkFunction, whose
attributes it uses): what it holds is counted, and a subtask over a limit of
pi_jobs.stream.limits commits its waiting group early or quarantines the assembling episodes that
have waited longest for a chunk, as `limit_exceeded` (format/SPEC.md 9.5). What waits in the
group, quarantines included, counts against max_held_bytes.
"""

from __future__ import annotations

from typing import Any

from pi_format import ProtocolError, QuarantineReason

from pi_jobs.stream import _metrics as metrics
from pi_jobs.stream.limits import oldest_idle


class HeldLimits:
    """Keeps `self.pending` and `self.waiting` within `self.limits` (see the module doc)."""

    limits: Any  # StreamLimits
    pending: dict[str, Any]  # episode_id -> pi_jobs.stream._sink._Pending
    waiting: list[Any]  # pi_jobs.stream._group_commit.Waiting
    refused: list[Any]  # pi_jobs.stream._group_commit.Refused
    dropped: set[str]
    progress: dict[str, Any]
    writer: Any

    # provided by EpisodeSinkFunction / GroupCommits (declared here for the type checker)
    def _flush(self) -> None:
        raise NotImplementedError

    def _quarantine(
        self,
        *,
        episode_id: str | None,
        err: ProtocolError | None,
        messages: list[Any],
        attempt_id: str,
        ack: bool,
        key: str,
        ctx: Any = None,
        now_ms: int | None = None,
    ) -> None:
        raise NotImplementedError

    def _limit_acted(self, limit: str) -> None:
        metrics.LIMIT_REFUSALS.labels(limit).inc()
        acted = self.progress.setdefault("limits_acted", {})
        acted[limit] = int(acted.get(limit, 0)) + 1

    def _held_bytes(self) -> int:
        return (
            sum(p.size_bytes for p in self.pending.values())
            + sum(w.size_bytes for w in self.waiting)
            + sum(r.size_bytes for r in self.refused)
        )

    def _make_room(self, key: str, size: int, *, new_episode: bool, now_ms: int) -> None:
        """Keep the subtask within its limits before `size` more bytes of `key` are held: commit
        the waiting group early, then quarantine the longest-idle assembling episodes."""
        lim = self.limits
        if self.waiting and new_episode:
            per_key = 1 + sum(1 for w in self.waiting if w.rows.episode_id == key)
            if per_key > lim.max_episodes_per_key:
                self._limit_acted("max_episodes_per_key")
                self._flush()
        if (self.waiting or self.refused) and self._held_bytes() + size > lim.max_held_bytes:
            self._limit_acted("max_held_bytes")
            self._flush()
        if new_episode and len(self.pending) >= lim.max_held_episodes:
            candidates = [(k, p.last_chunk_ms) for k, p in self.pending.items() if k != key]
            for victim in oldest_idle(candidates, len(self.pending) - lim.max_held_episodes + 1):
                self._evict(
                    victim,
                    "max_held_episodes",
                    f"{len(self.pending)} episodes were being assembled, max_held_episodes is "
                    f"{lim.max_held_episodes} (pilake stream --max-held-episodes); this one had "
                    f"waited longest for a chunk ({now_ms - self.pending[victim].last_chunk_ms} ms)",
                )
        while self._held_bytes() + size > lim.max_held_bytes:
            if self.waiting or self.refused:  # an evicted episode waits in the group: commit it
                self._flush()
                continue
            candidates = [(k, p.last_chunk_ms) for k, p in self.pending.items() if k != key]
            if not candidates:  # only the key's own episode: within max_episode_bytes
                break
            victim = oldest_idle(candidates, 1)[0]
            self._evict(
                victim,
                "max_held_bytes",
                f"the subtask held {self._held_bytes()} bytes and {size} more arrived, "
                f"max_held_bytes is {lim.max_held_bytes} (pilake stream --max-held-mb); this "
                f"episode had waited longest for a chunk ({now_ms - self.pending[victim].last_chunk_ms} ms)",
            )

    def _evict(self, key: str, limit: str, detail: str) -> None:
        """Quarantine the pending episode of another key (its timer later finds it gone and, once
        the quarantine is committed, clears its held positions)."""
        pending = self.pending.pop(key)
        self._refuse(pending, limit, detail)

    def _refuse(
        self, pending: Any, limit: str, detail: str, *, ctx: Any = None, now_ms: int | None = None
    ) -> None:
        """Quarantine a pending episode as limit_exceeded, with its messages' raw rows, in the
        next group commit (`ctx`: it is the current key's). No ack: the uploader re-sends it,
        and a re-send within the limits commits it."""
        self._limit_acted(limit)
        messages = sorted(pending.messages, key=lambda m: (m.partition, m.offset))
        if not messages:
            return
        self._quarantine(
            episode_id=pending.assembler.episode_id,
            err=ProtocolError(QuarantineReason.LIMIT_EXCEEDED, detail),
            messages=messages,
            attempt_id=pending.attempt_id,
            ack=False,
            key=pending.assembler.episode_id,
            ctx=ctx,
            now_ms=now_ms,
        )
