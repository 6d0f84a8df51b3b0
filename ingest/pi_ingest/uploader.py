"""The uploader: spooled episodes -> Kafka raw topic, until the lake acknowledges them.

First hop of the data flow. `submit` encodes an episode into wire messages and spools them on
disk (durable before it returns); `send_pending` produces every spooled episode not yet sent
(or sent too long ago without an ack) with an idempotent producer; `poll_acks` reads the lake's
acknowledgements (`episodes.ack.v1`, published by the stream job after the Delta commit or the
quarantine write) and drops confirmed episodes from the spool. At-least-once delivery plus the
lake's de-duplication by episode_id gives exactly-once effect (architecture decision 3).

Kafka specifics (see ARCHITECTURE.md): end offsets of the local broker are wrong, so nothing
here reads high watermarks; the ack consumer uses `assign()` from the beginning (no group join);
after a broker restart the idempotent producer fails with UNKNOWN_PRODUCER_ID forever, so it is
recreated and the whole episode is sent again.
"""

from __future__ import annotations

import functools
import logging
import math
import time
import types
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pi_format.episode import Episode, check_name
from pi_format.errors import ProtocolError
from pi_format.topics import ACK_TOPIC, RAW_TOPIC, Ack, AckStatus
from pi_format.wire import (
    BUNDLE_SUFFIX,
    EpisodeAssembler,
    decode_chunk,
    encode_episode,
    read_bundle,
)

from pi_ingest.errors import BundleError
from pi_ingest.spool import Spool, SpoolEntry

logger = logging.getLogger("pi_ingest")

# Options the uploader sets itself: letting callers override them would break its guarantees
# (idempotence, acks=all) or its bookkeeping (callbacks).
_RESERVED_OPTIONS = frozenset(
    {"bootstrap.servers", "enable.idempotence", "acks", "error_cb", "on_delivery", "logger", "group.id"}
)
# A chunk is at most pi_format's MAX_CHUNK_BYTES (1 MB); 1.2 MB leaves room for Kafka's record
# overhead so no valid chunk is ever refused by the client.
_MESSAGE_MAX_BYTES = 1_200_000
# Small: chunks of one episode are produced back to back, so 5 ms already fills batches, and
# the per-episode wait for delivery reports stays short.
_LINGER_MS = 5


@dataclass(frozen=True, slots=True)
class UploaderConfig:
    """Where and how the uploader sends.

    Args:
        bootstrap_servers: Kafka bootstrap servers, e.g. "127.0.0.1:19092".
        spool_dir: the durable spool directory (created if missing).
        raw_topic: topic for wire chunks.
        ack_topic: topic of the lake's acknowledgements.
        resend_after_s: an episode sent but not acknowledged within this time is sent again.
            120 s: the stream job acks after its Delta commit, normally within seconds to a
            minute (checkpoint interval plus featurization); waiting two minutes keeps
            re-sends rare (they are harmless, the lake de-duplicates, but cost bandwidth)
            while an episode lost in transit (e.g. a broker restart wiped it) is re-sent soon.
        delivery_timeout_s: how long librdkafka retries one message before reporting failure.
        backoff_initial_s: first pause before retrying failed messages; doubles each round.
        backoff_max_s: longest pause between retry rounds.
        send_rounds: attempts per episode within one `send_pending` call before it is left
            pending for the next call (3: the first try, a retry, a retry with a new producer).
        client_options: extra librdkafka settings for the producer and the consumer, as-is
            (security.protocol, sasl.*, ssl.*). Values never appear in repr or logs.

    Example:
        >>> cfg = UploaderConfig("127.0.0.1:19092", Path("spool"),
        ...                      client_options={"security.protocol": "SASL_SSL"})
    """

    bootstrap_servers: str
    spool_dir: Path
    raw_topic: str = RAW_TOPIC
    ack_topic: str = ACK_TOPIC
    resend_after_s: float = 120.0
    delivery_timeout_s: float = 30.0
    backoff_initial_s: float = 0.5
    backoff_max_s: float = 30.0
    send_rounds: int = 3
    client_options: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.bootstrap_servers, str) or not self.bootstrap_servers.strip():
            raise ValueError(
                f"bootstrap_servers must be a non-empty 'host:port[,host:port]' string, "
                f"got {self.bootstrap_servers!r}"
            )
        if isinstance(self.spool_dir, str):
            object.__setattr__(self, "spool_dir", Path(self.spool_dir))
        if not isinstance(self.spool_dir, Path):
            raise TypeError(f"spool_dir must be a Path, got {type(self.spool_dir).__name__}")
        check_name("raw_topic", self.raw_topic)
        check_name("ack_topic", self.ack_topic)
        if self.raw_topic == self.ack_topic:
            raise ValueError(f"raw_topic and ack_topic must differ, both are {self.raw_topic!r}")
        for name, low, inclusive in (
            ("resend_after_s", 0.0, True),
            ("delivery_timeout_s", 0.0, False),
            ("backoff_initial_s", 0.0, False),
            ("backoff_max_s", 0.0, False),
        ):
            value = getattr(self, name)
            ok = isinstance(value, int | float) and math.isfinite(value)
            ok = ok and (value >= low if inclusive else value > low)
            if not ok:
                rule = ">= 0" if inclusive else "> 0"
                raise ValueError(f"{name} must be a finite number {rule}, got {value!r}")
        if self.backoff_max_s < self.backoff_initial_s:
            raise ValueError(
                f"backoff_max_s must be >= backoff_initial_s ({self.backoff_initial_s}), "
                f"got {self.backoff_max_s}"
            )
        if (
            isinstance(self.send_rounds, bool)
            or not isinstance(self.send_rounds, int)
            or self.send_rounds < 1
        ):
            raise ValueError(f"send_rounds must be an integer >= 1, got {self.send_rounds!r}")
        if not isinstance(self.client_options, Mapping):
            raise TypeError(
                f"client_options must be a mapping of str to str, got {type(self.client_options).__name__}"
            )
        for key, value in self.client_options.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise TypeError(
                    f"client_options must map str to str; key {key!r} has a {type(value).__name__} value"
                )
            if key in _RESERVED_OPTIONS:
                raise ValueError(
                    f"client_options must not set {key!r}: the uploader sets it (use the config "
                    f"field instead, or leave it to the uploader); reserved: {sorted(_RESERVED_OPTIONS)}"
                )
        object.__setattr__(self, "client_options", types.MappingProxyType(dict(self.client_options)))

    def __repr__(self) -> str:
        # Never show client option values: they hold passwords and key material.
        hidden = {k: "***" for k in sorted(self.client_options)}
        return (
            f"UploaderConfig(bootstrap_servers={self.bootstrap_servers!r}, spool_dir={self.spool_dir!r}, "
            f"raw_topic={self.raw_topic!r}, ack_topic={self.ack_topic!r}, "
            f"resend_after_s={self.resend_after_s!r}, delivery_timeout_s={self.delivery_timeout_s!r}, "
            f"backoff_initial_s={self.backoff_initial_s!r}, backoff_max_s={self.backoff_max_s!r}, "
            f"send_rounds={self.send_rounds!r}, client_options={hidden!r})"
        )

    __str__ = __repr__


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


class _KafkaLog:
    """Receives librdkafka's log lines (its `logger` option) and files them at DEBUG.

    librdkafka logs every failed reconnect at error level (hundreds of lines while a broker
    is down); the uploader reports what matters itself, once per episode, at WARNING.
    """

    def __init__(self) -> None:
        self._logger = logging.getLogger("pi_ingest.kafka")

    def log(self, level: int, msg: str, *args: object, **kwargs: object) -> None:
        self._logger.debug(msg, *args)


def _is_recreate_error(err: Any) -> bool:
    """Errors after which the producer itself is unusable (or livelocked) and must be rebuilt."""
    from confluent_kafka import KafkaError

    codes = {
        KafkaError._FATAL,
        KafkaError.UNKNOWN_PRODUCER_ID,
        KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER,
        KafkaError.INVALID_PRODUCER_EPOCH,
        KafkaError._MSG_TIMED_OUT,  # the livelock after a broker restart ends as timeouts
        KafkaError._PURGE_QUEUE,
        KafkaError._PURGE_INFLIGHT,
    }
    return bool(err.fatal()) or err.code() in codes


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

    def __init__(self, config: UploaderConfig) -> None:
        if not isinstance(config, UploaderConfig):
            raise TypeError(f"config must be an UploaderConfig, got {type(config).__name__}")
        self.config = config
        self.spool = Spool(config.spool_dir)
        self._producer: Any = None
        self._consumer: Any = None
        self._fatal: Any = None
        self._assigned = False
        self._sent_messages = 0
        self._sent_bytes = 0
        self._resent_episodes = 0
        self._committed: list[str] = []
        self._quarantined: list[str] = []
        self._kafka_logger = _KafkaLog()

    # -- context manager -----------------------------------------------------------------------

    def __enter__(self) -> Uploader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Release the Kafka clients. Spooled episodes stay on disk for the next uploader."""
        self._drop_producer()
        if self._consumer is not None:
            try:
                self._consumer.close()
            finally:
                self._consumer = None

    # -- spooling ------------------------------------------------------------------------------

    def submit(self, episode: Episode) -> SpoolEntry:
        """Encode `episode` and spool it durably; it is sent by `send_pending`.

        Raises:
            SpoolError: the episode id is already spooled with different bytes.
        """
        return self.spool.add(episode.episode_id, encode_episode(episode))

    def submit_bundle(self, path: Path) -> SpoolEntry:
        """Check a bundle file (one whole, valid episode) and spool its messages as they are.

        Raises:
            BundleError: the file is unreadable, mixes episodes, or fails the manifest checks.
            SpoolError: the episode id is already spooled with different bytes.
        """
        path = Path(path)
        try:
            messages = read_bundle(path)
        except OSError as err:
            raise BundleError(f"cannot read bundle {path}: {err}") from err
        except ProtocolError as err:
            raise BundleError(f"{path} is not a valid bundle: {err}") from err
        if not messages:
            raise BundleError(f"bundle {path} holds no messages")
        assembler: EpisodeAssembler | None = None
        for i, message in enumerate(messages):
            try:
                chunk = decode_chunk(message)
            except ProtocolError as err:
                raise BundleError(f"message {i} of bundle {path} does not decode: {err}") from err
            if assembler is None:
                assembler = EpisodeAssembler(chunk.episode_id)
            if chunk.episode_id != assembler.episode_id:
                raise BundleError(
                    f"bundle {path} mixes episodes: message {i} is {chunk.episode_id!r}, "
                    f"message 0 is {assembler.episode_id!r}; a bundle holds one episode"
                )
            try:
                assembler.add(chunk)
            except ProtocolError as err:
                raise BundleError(f"message {i} of bundle {path}: {err}") from err
        if assembler is None or not assembler.is_complete:
            have = 0 if assembler is None else len(assembler.chunks)
            raise BundleError(
                f"bundle {path} is incomplete: {have} of "
                f"{None if assembler is None else assembler.chunk_count} chunks"
            )
        try:
            assembler.assemble()  # manifest, checksums and metadata: refuse locally, not in the lake
        except ProtocolError as err:
            raise BundleError(f"bundle {path} fails the episode checks: {err}") from err
        return self.spool.add(assembler.episode_id, messages)

    # -- producing -----------------------------------------------------------------------------

    def _on_error(self, err: Any) -> None:
        if err.fatal():
            self._fatal = err
            logger.warning("kafka producer fatal error: %s", err)
        else:
            logger.debug("kafka client error: %s", err)

    def _get_producer(self) -> Any:
        if self._producer is None:
            from confluent_kafka import Producer

            conf: dict[str, Any] = {
                "bootstrap.servers": self.config.bootstrap_servers,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": _LINGER_MS,
                "message.max.bytes": _MESSAGE_MAX_BYTES,
                "delivery.timeout.ms": int(self.config.delivery_timeout_s * 1000),
                "request.timeout.ms": int(min(30.0, self.config.delivery_timeout_s) * 1000),
                "client.id": "pi-ingest",
                "error_cb": self._on_error,
                "logger": self._kafka_logger,
            }
            conf.update(self.config.client_options)
            self._producer = Producer(conf)
            self._fatal = None
        return self._producer

    def _drop_producer(self) -> None:
        producer, self._producer = self._producer, None
        if producer is None:
            return
        try:  # drop whatever is queued: it is re-sent from the spool by a fresh producer
            producer.purge()
            producer.flush(0)
        except Exception as err:  # a fatal producer may refuse even this; it is discarded anyway
            logger.debug("ignoring error while discarding producer: %s", err)

    def _produce(
        self, episode_id: str, messages: Sequence[bytes], indices: Sequence[int], deadline: float | None
    ) -> tuple[list[int], bool]:
        """Produce messages[i] for i in indices and wait for their delivery reports.

        Returns:
            (indices that failed, whether the producer must be recreated).
        """
        from confluent_kafka import KafkaException

        producer = self._get_producer()
        reports: dict[int, Any] = {}

        def on_delivery(i: int, err: Any, _msg: Any) -> None:
            reports[i] = err

        key = episode_id.encode()
        for i in indices:
            while True:
                try:
                    producer.produce(
                        self.config.raw_topic,
                        value=messages[i],
                        key=key,
                        on_delivery=functools.partial(on_delivery, i),
                    )
                    break
                except BufferError:  # local queue full: serve delivery reports, then retry
                    producer.poll(0.1)
                except KafkaException as exc:
                    err = exc.args[0]
                    logger.warning("producing chunk %d of %s failed: %s", i, episode_id, err)
                    if _is_recreate_error(err):
                        return list(indices), True
                    reports[i] = err
                    break
            producer.poll(0)
        wait_until = time.monotonic() + self.config.delivery_timeout_s + 5.0
        if deadline is not None:
            wait_until = min(wait_until, max(deadline, time.monotonic() + 1.0))
        while len(reports) < len(indices) and self._fatal is None and time.monotonic() < wait_until:
            producer.flush(0.1)
        failed = [i for i in indices if reports.get(i) is not None or i not in reports]
        delivered = [i for i in indices if i in reports and reports[i] is None]
        self._sent_messages += len(delivered)
        self._sent_bytes += sum(len(messages[i]) for i in delivered)
        errors = [reports[i] for i in failed if i in reports]
        recreate = (
            self._fatal is not None
            or any(i not in reports for i in indices)
            or any(_is_recreate_error(e) for e in errors)
        )
        if errors:
            logger.warning(
                "%d of %d chunks of %s failed, first error: %s",
                len(failed),
                len(indices),
                episode_id,
                errors[0],
            )
        return failed, recreate

    def _send_episode(self, entry: SpoolEntry, deadline: float | None) -> bool:
        messages = self.spool.messages(entry.episode_id)
        remaining: list[int] = list(range(len(messages)))
        backoff = self.config.backoff_initial_s
        for attempt in range(self.config.send_rounds):
            failed, recreate = self._produce(entry.episode_id, messages, remaining, deadline)
            if not failed:
                self.spool.mark_sent(entry.episode_id, time.time_ns())
                if entry.attempts > 0:
                    self._resent_episodes += 1
                return True
            if recreate:
                # A fresh producer gets a new producer id; send the whole episode again so no
                # chunk depends on the old producer's (possibly lost) sequence numbers.
                logger.warning("recreating the kafka producer and re-sending %s", entry.episode_id)
                self._drop_producer()
                remaining = list(range(len(messages)))
            else:
                remaining = failed
            if attempt + 1 == self.config.send_rounds:
                break
            pause = backoff
            if deadline is not None:
                pause = min(pause, deadline - time.monotonic())
                if pause <= 0:
                    break
            time.sleep(pause)
            backoff = min(backoff * 2, self.config.backoff_max_s)
        logger.warning("episode %s could not be delivered; it stays in the spool", entry.episode_id)
        return False

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
        before = self._sent_messages
        for entry in self.spool.entries():
            if entry.last_sent_ns is not None and now_ns - entry.last_sent_ns < resend_ns:
                continue
            if deadline is not None and time.monotonic() >= deadline:
                break
            if entry.attempts > 0:
                logger.info("re-sending %s (attempt %d, no ack yet)", entry.episode_id, entry.attempts + 1)
            if not self._send_episode(entry, deadline):
                break
        return self._sent_messages - before

    # -- acknowledgements ----------------------------------------------------------------------

    def _get_consumer(self, metadata_timeout_s: float) -> Any:
        """The ack consumer, assigned to every partition from the beginning; None until the topic exists."""
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        if self._consumer is None:
            conf: dict[str, Any] = {
                "bootstrap.servers": self.config.bootstrap_servers,
                # Needed by the client, never joined: assign() below skips the group protocol.
                "group.id": f"pi-ingest-acks-{uuid.uuid4().hex}",
                "enable.auto.commit": False,
                # After a broker restart our position is past the new log's end: start over.
                "auto.offset.reset": "earliest",
                "session.timeout.ms": 6000,
                "heartbeat.interval.ms": 1000,
                "fetch.wait.max.ms": 100,
                "logger": self._kafka_logger,
            }
            conf.update(self.config.client_options)
            self._consumer = Consumer(conf)
            self._assigned = False
        if not self._assigned:
            meta = self._consumer.list_topics(self.config.ack_topic, timeout=metadata_timeout_s)
            topic = meta.topics.get(self.config.ack_topic)
            if topic is None or topic.error is not None or not topic.partitions:
                logger.debug("ack topic %s not available yet", self.config.ack_topic)
                return None
            self._consumer.assign(
                [TopicPartition(self.config.ack_topic, p, OFFSET_BEGINNING) for p in sorted(topic.partitions)]
            )
            self._assigned = True
        return self._consumer

    def _handle_ack(self, value: bytes | None) -> Ack | None:
        if value is None:
            return None
        try:
            ack = Ack.decode(value)
            entry = self.spool.get(ack.episode_id)
        except ValueError as err:  # garbage on the topic, or an id that is no valid name
            logger.debug("ignoring unreadable ack: %s", err)
            return None
        if entry is None:
            return None
        self.spool.confirm(ack.episode_id, status=ack.status.value, attempt_id=ack.attempt_id)
        if ack.status is AckStatus.QUARANTINED:
            # Durable in the quarantine table: nothing a re-send could fix, so it is done too.
            logger.warning("episode %s was quarantined by the lake: %s", ack.episode_id, ack.reason)
            self._quarantined.append(ack.episode_id)
        else:
            self._committed.append(ack.episode_id)
        return ack

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
        from confluent_kafka import KafkaError

        deadline = time.monotonic() + max(0.0, timeout_s)
        acks: list[Ack] = []
        while True:
            remaining = deadline - time.monotonic()
            consumer = self._get_consumer(min(5.0, max(0.5, remaining)))
            if consumer is None:
                if remaining <= 0:
                    break
                time.sleep(min(0.5, remaining))
                continue
            batch = consumer.consume(num_messages=1000, timeout=max(0.0, min(remaining, 0.5)))
            for msg in batch:
                if msg.error() is not None:
                    if msg.error().code() != KafkaError._PARTITION_EOF:
                        logger.debug("ack consumer error: %s", msg.error())
                    continue
                ack = self._handle_ack(msg.value())
                if ack is not None:
                    acks.append(ack)
            if remaining <= 0 or len(self.spool) == 0 or (acks and not batch):
                break
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
        base_msgs, base_bytes, base_resent = self._sent_messages, self._sent_bytes, self._resent_episodes
        base_committed, base_quarantined = len(self._committed), len(self._quarantined)
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
                    logger.info(
                        "upload: %d confirmed, %d pending, %d messages sent, %.0f s left",
                        len(self._committed) - base_committed + len(self._quarantined) - base_quarantined,
                        len(self.spool),
                        self._sent_messages - base_msgs,
                        deadline - now,
                    )
                if len(self.spool) == 0:
                    break
        entries = self.spool.entries()
        report = UploadReport(
            submitted=submitted,
            sent_messages=self._sent_messages - base_msgs,
            sent_bytes=self._sent_bytes - base_bytes,
            resent_episodes=self._resent_episodes - base_resent,
            committed=tuple(self._committed[base_committed:]),
            quarantined=tuple(self._quarantined[base_quarantined:]),
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


def _bundle_files(paths: Sequence[Path]) -> list[Path]:
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(p.glob(f"*{BUNDLE_SUFFIX}"))
            if not found:
                raise BundleError(f"directory {p} holds no *{BUNDLE_SUFFIX} bundles")
            files.extend(found)
        elif p.is_file():
            files.append(p)
        else:
            raise BundleError(f"{p} is neither a bundle file nor a directory of bundles")
    return files


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
    files = _bundle_files(paths)
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
            sent_bytes=up._sent_bytes,
            resent_episodes=up._resent_episodes,
            committed=(),
            quarantined=(),
            pending=tuple(e.episode_id for e in entries),
            elapsed_s=time.monotonic() - start,
            unsent=tuple(e.episode_id for e in entries if e.last_sent_ns is None),
        )
