"""The uploader: spooled episodes -> Kafka raw topic, until the lake acknowledges them.

First hop of the data flow. `submit` encodes an episode into wire messages and spools them on
disk (durable before it returns); `send_pending` produces every spooled episode not yet sent
(or sent too long ago without an ack) with an idempotent producer; `poll_acks` reads the lake's
acknowledgements (`episodes.ack.v1`, published by the stream job after the Delta commit or the
quarantine write) and drops confirmed episodes from the spool. At-least-once delivery plus the
lake's de-duplication by episode_id gives exactly-once effect (architecture decision 3).

This module is the orchestration: which spooled episodes are due, the send/ack loop, and
`upload_paths`. The parts it drives each live in their own module: options in `_config`
(`UploaderConfig` is re-exported here), bundle checks in `_bundles`, the spool in `spool`, the
idempotent producer (recreated after a broker restart) in `_producer`, the ack consumer in
`_acks`. Kafka specifics are documented there and in ARCHITECTURE.md.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from pi_format.episode import Episode
from pi_format.jsonlog import default_event_log, event_logger, log_event
from pi_format.topics import Ack
from pi_format.wire import encode_episode

from pi_ingest._acks import AckListener
from pi_ingest._bundles import bundle_files, read_checked_bundle
from pi_ingest._config import UploaderConfig
from pi_ingest._kafka_log import KafkaLog
from pi_ingest._metrics import EPISODES_RESENT, EPISODES_SENT, SEND_FAILURES, serve_metrics, watch_spool
from pi_ingest._producer import EpisodeProducer
from pi_ingest.errors import PiIngestError
from pi_ingest.spool import Spool, SpoolEntry

__all__ = ["UploadReport", "Uploader", "UploaderConfig", "upload_paths"]

logger = logging.getLogger("pi_ingest")


@dataclass(frozen=True, slots=True)
class UploadReport:
    """What one upload run did.

    `committed`/`quarantined`: episodes the lake acknowledged during the run; `pending`: still
    spooled at the end; `unsent`: the pending ones never delivered to the broker at all.
    """

    submitted: int
    sent_messages: int
    sent_bytes: int
    resent_episodes: int
    committed: tuple[str, ...]
    quarantined: tuple[str, ...]
    pending: tuple[str, ...]
    elapsed_s: float
    unsent: tuple[str, ...] = ()


class Uploader:
    """Spools episodes durably and sends them until the lake confirms them.

    Use as a context manager; not thread-safe (one uploader per spool directory).

    Example:
        >>> with Uploader(UploaderConfig("127.0.0.1:19092", Path("spool"))) as up:
        ...     up.submit(episode)
        ...     report = up.run_until_confirmed(timeout_s=300)
        >>> report.pending
        ()
    """

    def __init__(self, config: UploaderConfig, *, event_log: Path | str | None = None) -> None:
        """`event_log`: a JSON-lines file for this uploader's episode events (spooled, sent,
        resent, acked; `pilake trace`); default `$PILAKE_EVENT_LOG_DIR/uploader-<pid>.jsonl`
        when that is set, else none."""
        if not isinstance(config, UploaderConfig):
            raise TypeError(f"config must be an UploaderConfig, got {type(config).__name__}")
        self.config = config
        self.spool = Spool(config.spool_dir)
        watch_spool(self.spool)
        if config.metrics_port is not None:
            try:
                serve_metrics(config.metrics_port)
            except PiIngestError as err:  # uploading matters more than watching it
                logger.warning("uploading without metrics: %s", err)
        kafka_log = KafkaLog()
        self._producer = EpisodeProducer(config, kafka_log)
        self._acks = AckListener(config, self.spool, kafka_log)
        self._resent_episodes = 0
        self._events = event_logger(
            "pi_ingest.events", event_log or default_event_log("uploader"), "uploader"
        )

    # -- context manager -----------------------------------------------------------------------

    def __enter__(self) -> Uploader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Release the Kafka clients. Spooled episodes stay on disk for the next uploader.

        Returns within 2 x `close_timeout_s` even when the broker never answers: a client that
        does not let go in time is left to a background thread (docs/uploader-liveness.md).
        """
        self._producer.drop()
        self._acks.close()

    # -- spooling ------------------------------------------------------------------------------

    def submit(self, episode: Episode) -> SpoolEntry:
        """Encode `episode` and spool it durably; it is sent by `send_pending`.

        Raises:
            SpoolError: the episode id is already spooled with different bytes.
        """
        return self._spooled(self.spool.add(episode.episode_id, encode_episode(episode)))

    def submit_bundle(self, path: Path) -> SpoolEntry:
        """Check a bundle file (one whole, valid episode) and spool its messages as they are.

        Raises:
            BundleError: the file is unreadable, mixes episodes, or fails the manifest checks.
            SpoolError: the episode id is already spooled with different bytes.
        """
        episode_id, messages = read_checked_bundle(path)
        return self._spooled(self.spool.add(episode_id, messages), bundle=str(path))

    def _spooled(self, entry: SpoolEntry, bundle: str | None = None) -> SpoolEntry:
        log_event(
            self._events,
            "spooled",
            episode_id=entry.episode_id,
            attempt_id=None,  # attempt ids are given by the stream job, per delivery it assembles
            messages=entry.message_count,
            bytes=entry.size_bytes,
            bundle=bundle,
        )
        return entry

    # -- sending -------------------------------------------------------------------------------

    def _send_episode(self, entry: SpoolEntry, deadline: float | None) -> bool:
        messages = self.spool.messages(entry.episode_id)
        if not self._producer.deliver(entry.episode_id, messages, deadline):
            logger.warning("episode %s could not be delivered; it stays in the spool", entry.episode_id)
            SEND_FAILURES.inc()
            log_event(
                self._events,
                "send_failed",
                episode_id=entry.episode_id,
                attempt_id=None,
                level=logging.WARNING,
                send=entry.attempts + 1,
            )
            return False
        self.spool.mark_sent(entry.episode_id, time.time_ns())
        log_event(
            self._events,
            "resent" if entry.attempts > 0 else "sent",
            episode_id=entry.episode_id,
            attempt_id=None,
            send=entry.attempts + 1,
            messages=len(messages),
        )
        EPISODES_SENT.inc()
        if entry.attempts > 0:
            self._resent_episodes += 1
            EPISODES_RESENT.inc()
        return True

    def send_pending(self, *, deadline: float | None = None) -> int:
        """Send every spooled episode never sent, or sent more than `resend_after_s` ago.

        Stops at the first episode that cannot be delivered after `send_rounds` tries (the
        broker is likely unreachable); the rest stay pending for the next call.

        Args:
            deadline: optional `time.monotonic()` value after which no new episode is started.

        Returns:
            The number of messages delivered to the broker.

        Example:
            >>> up.submit(episode)
            >>> up.send_pending()
            7
        """
        now_ns = time.time_ns()
        resend_ns = int(self.config.resend_after_s * 1e9)
        before = self._producer.sent_messages
        for entry in self.spool.entries():
            if entry.last_sent_ns is not None and now_ns - entry.last_sent_ns < resend_ns:
                continue
            if deadline is not None and time.monotonic() >= deadline:
                break
            if entry.attempts > 0:
                logger.info("re-sending %s (attempt %d, no ack yet)", entry.episode_id, entry.attempts + 1)
            if not self._send_episode(entry, deadline):
                break
        return self._producer.sent_messages - before

    # -- acknowledgements ----------------------------------------------------------------------

    def poll_acks(self, timeout_s: float) -> list[Ack]:
        """Read acknowledgements for up to `timeout_s` and confirm the matching spool entries.

        Returns early when the spool is empty, or when acks arrived and the topic then went
        quiet. Acks for unknown episodes and unreadable messages are ignored.

        Returns:
            The acks that confirmed a spooled episode.

        Example:
            >>> [a.episode_id for a in up.poll_acks(5.0)]
            ['sim0-r000-e00000']
        """
        acks = self._acks.poll(timeout_s)
        for ack in acks:
            log_event(
                self._events,
                "acked",
                episode_id=ack.episode_id,
                attempt_id=ack.attempt_id,
                status=ack.status.value,
                reason=ack.reason or None,
            )
        return acks

    # -- the loop ------------------------------------------------------------------------------

    def run_until_confirmed(self, *, timeout_s: float, progress: bool = False) -> UploadReport:
        """Send and re-send until every spooled episode is acknowledged, or `timeout_s` passes.

        Returns:
            A report; `pending` lists the episodes still unconfirmed at the end.

        Example:
            >>> report = up.run_until_confirmed(timeout_s=600, progress=True)
            >>> len(report.committed), report.pending
            (4, ())
        """
        from tqdm import tqdm

        if not (timeout_s >= 0 and math.isfinite(timeout_s)):
            raise ValueError(f"timeout_s must be a finite number >= 0, got {timeout_s!r}")
        start = time.monotonic()
        deadline = start + timeout_s
        submitted = len(self.spool)
        base_msgs, base_bytes = self._producer.sent_messages, self._producer.sent_bytes
        base_resent = self._resent_episodes
        base_committed, base_quarantined = len(self._acks.committed), len(self._acks.quarantined)
        next_log = start + 10.0
        with tqdm(total=submitted, unit="episode", desc="upload", disable=not progress) as bar:
            while True:
                self.send_pending(deadline=deadline)
                remaining = deadline - time.monotonic()
                if len(self.spool) == 0 or remaining <= 0:
                    break
                acks = self.poll_acks(min(1.0, remaining))
                bar.update(len(acks))
                now = time.monotonic()
                if now >= next_log:
                    next_log = now + 10.0
                    confirmed = len(self._acks.committed) + len(self._acks.quarantined)
                    logger.info(
                        "upload: %d confirmed, %d pending, %d messages sent, %.0f s left",
                        confirmed - base_committed - base_quarantined,
                        len(self.spool),
                        self._producer.sent_messages - base_msgs,
                        deadline - now,
                    )
                if len(self.spool) == 0:
                    break
        entries = self.spool.entries()
        report = UploadReport(
            submitted=submitted,
            sent_messages=self._producer.sent_messages - base_msgs,
            sent_bytes=self._producer.sent_bytes - base_bytes,
            resent_episodes=self._resent_episodes - base_resent,
            committed=tuple(self._acks.committed[base_committed:]),
            quarantined=tuple(self._acks.quarantined[base_quarantined:]),
            pending=tuple(e.episode_id for e in entries),
            elapsed_s=time.monotonic() - start,
            unsent=tuple(e.episode_id for e in entries if e.last_sent_ns is None),
        )
        logger.info(
            "upload finished in %.1f s: %d committed, %d quarantined, %d pending",
            report.elapsed_s,
            len(report.committed),
            len(report.quarantined),
            len(report.pending),
        )
        return report


def upload_paths(
    paths: Sequence[Path], config: UploaderConfig, *, wait_s: float | None, progress: bool
) -> UploadReport:
    """Upload bundle files (or directories of `*.piep` bundles): `pilake upload PATH...`.

    Every bundle is checked and spooled first, then everything pending in the spool (also
    left over from earlier runs) is sent. With `wait_s`, waits up to that long for the lake's
    acknowledgements, re-sending as needed. Undeliverable episodes are not an exception:
    they stay spooled and are listed in the report's `unsent` (a CLI exits non-zero on them).

    Raises:
        BundleError: a path is missing or a bundle is invalid (nothing is sent then).

    Example:
        >>> report = upload_paths([Path("bundles")], cfg, wait_s=300, progress=True)
        >>> report.pending
        ()
    """
    from tqdm import tqdm

    start = time.monotonic()
    files = bundle_files(paths)
    with Uploader(config) as up:
        for f in tqdm(files, unit="bundle", desc="spool", disable=not progress):
            up.submit_bundle(f)
        if wait_s is not None:
            report = up.run_until_confirmed(timeout_s=wait_s, progress=progress)
            return replace(report, submitted=len(files), elapsed_s=time.monotonic() - start)
        sent = up.send_pending()
        entries = up.spool.entries()
        return UploadReport(
            submitted=len(files),
            sent_messages=sent,
            sent_bytes=up._producer.sent_bytes,
            resent_episodes=up._resent_episodes,
            committed=(),
            quarantined=(),
            pending=tuple(e.episode_id for e in entries),
            elapsed_s=time.monotonic() - start,
            unsent=tuple(e.episode_id for e in entries if e.last_sent_ns is None),
        )
