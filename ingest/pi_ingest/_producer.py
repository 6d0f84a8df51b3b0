"""The uploader's Kafka producer: one episode's wire messages -> the raw topic, confirmed by the broker.

Second hop of the uploader (after the spool in `pi_ingest.spool`, driven by the loop in
`pi_ingest.uploader`). The producer is idempotent with acks=all, so a retried chunk never lands
twice from one producer. After a broker restart it fails with UNKNOWN_PRODUCER_ID forever (see
ARCHITECTURE.md), so it is recreated and the whole episode is sent again; duplicates across
producers are harmless, the lake de-duplicates by episode_id.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Sequence
from typing import Any

from pi_ingest._access import access_error, is_access_error
from pi_ingest._bounded import end_client, too_many_abandoned
from pi_ingest._config import UploaderConfig
from pi_ingest._kafka_log import KafkaLog
from pi_ingest._metrics import BYTES_SENT, CHUNKS_SENT

logger = logging.getLogger("pi_ingest")

# A chunk is at most pi_format's MAX_CHUNK_BYTES (1 MB); 1.2 MB leaves room for Kafka's record
# overhead so no valid chunk is ever refused by the client.
_MESSAGE_MAX_BYTES = 1_200_000
# Small: chunks of one episode are produced back to back, so 5 ms already fills batches, and
# the per-episode wait for delivery reports stays short.
_LINGER_MS = 5


def _end_producer(producer: Any) -> None:
    producer.purge()
    producer.flush(0)


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


class EpisodeProducer:
    """Sends the messages of one episode at a time and waits until the broker confirms them.

    The confluent-kafka producer is created on first use and discarded (with whatever it still
    has queued) when it becomes unusable; the next send builds a fresh one with a new producer
    id. `sent_messages`/`sent_bytes` count what the broker confirmed over this object's life.
    Not thread-safe.

    Example:
        >>> producer = EpisodeProducer(config, KafkaLog())
        >>> producer.deliver(episode.episode_id, encode_episode(episode), deadline=None)
        True
        >>> producer.sent_messages
        7
    """

    def __init__(self, config: UploaderConfig, kafka_log: KafkaLog) -> None:
        self.config = config
        self._producer: Any = None
        self._fatal: Any = None
        self._refused: Any = None  # the broker's refusal (credentials, TLS, ACLs): see _access
        self._kafka_logger = kafka_log
        self._token = object()  # identifies the current producer to error_cb
        self.sent_messages = 0
        self.sent_bytes = 0

    def _on_error(self, token: object, err: Any) -> None:
        if token is not self._token:  # from a producer already dropped
            logger.debug("kafka error from a discarded producer: %s", err)
            return
        if is_access_error(err):
            self._refused = err
            logger.debug("kafka refused the producer: %s", err)
        elif err.fatal():
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
                "error_cb": functools.partial(self._on_error, self._token),
                "logger": self._kafka_logger,
            }
            conf.update(self.config.client_options)
            self._producer = Producer(conf)
            self._fatal = None
            self._refused = None
        return self._producer

    def drop(self) -> None:
        """Discard the producer and whatever it has queued; the next send creates a fresh one.

        Returns within `close_timeout_s` whatever the broker does: the producer is ended on a
        thread of its own (`pi_ingest._bounded`) and abandoned there if librdkafka does not let
        go of it in time.
        """
        box, self._producer = [self._producer], None  # the thread holds the last reference
        self._token = object()  # errors the old producer still reports are not ours any more
        # Drop whatever is queued (re-sent from the spool by a fresh producer). purge() with
        # its defaults is librdkafka's non-blocking purge (see _bounded); flush(0) serves the
        # purged messages' reports; the thread's last reference then runs rd_kafka_destroy.
        end_client(box, _end_producer, call="producer_destroy", timeout_s=self.config.close_timeout_s)

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
        wait_until = time.monotonic() + self.config.delivery_timeout_s + 5.0
        if deadline is not None:
            wait_until = min(wait_until, max(deadline, time.monotonic() + 1.0))
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
                    if time.monotonic() >= wait_until:  # nothing drains it: a fresh producer
                        logger.warning("kafka queue stayed full while producing %s", episode_id)
                        return list(indices), True
                    producer.poll(0.1)
                except KafkaException as exc:
                    err = exc.args[0]
                    logger.warning("producing chunk %d of %s failed: %s", i, episode_id, err)
                    if _is_recreate_error(err):
                        return list(indices), True
                    reports[i] = err
                    break
            producer.poll(0)
        while (
            len(reports) < len(indices)
            and self._fatal is None
            and self._refused is None
            and time.monotonic() < wait_until
        ):
            producer.flush(0.1)
        refused = [reports[i] for i in indices if is_access_error(reports.get(i))]
        if refused and self._refused is None:
            self._refused = refused[0]  # e.g. TOPIC_AUTHORIZATION_FAILED: no Write ACL
        failed = [i for i in indices if reports.get(i) is not None or i not in reports]
        delivered = [i for i in indices if i in reports and reports[i] is None]
        delivered_bytes = sum(len(messages[i]) for i in delivered)
        self.sent_messages += len(delivered)
        self.sent_bytes += delivered_bytes
        CHUNKS_SENT.inc(len(delivered))
        BYTES_SENT.inc(delivered_bytes)
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

    def deliver(self, episode_id: str, messages: Sequence[bytes], deadline: float | None) -> bool:
        """Send every message of one episode, retrying in up to `send_rounds` rounds.

        Failed messages are retried after a pause that doubles each round (from
        `backoff_initial_s` up to `backoff_max_s`); when the producer must be recreated, the
        whole episode is sent again by the fresh one.

        Args:
            episode_id: the Kafka key of every message.
            messages: the episode's wire messages, manifest last.
            deadline: optional `time.monotonic()` value; no pause runs past it.

        Returns:
            True once the broker confirmed every message; False when a round limit or the
            deadline was reached first.

        Raises:
            KafkaAccessError: the broker refused the credentials, the TLS handshake or the
                Write ACL on the raw topic (the messages stay in the caller's spool).
        """
        if self._producer is None and too_many_abandoned():
            # Earlier producers are still stuck in librdkafka: build no more until one ends.
            logger.warning("not sending %s: earlier kafka producers are still stuck", episode_id)
            return False
        remaining: list[int] = list(range(len(messages)))
        backoff = self.config.backoff_initial_s
        for attempt in range(self.config.send_rounds):
            failed, recreate = self._produce(episode_id, messages, remaining, deadline)
            if not failed:
                return True
            if self._refused is not None:  # no retry fixes credentials or ACLs: say so, stop
                err, self._refused = self._refused, None
                self.drop()
                raise access_error(
                    err,
                    client_options=self.config.client_options,
                    bootstrap_servers=self.config.bootstrap_servers,
                    topic=self.config.raw_topic,
                    action="write to",
                )
            if recreate:
                # A fresh producer gets a new producer id; send the whole episode again so no
                # chunk depends on the old producer's (possibly lost) sequence numbers.
                logger.warning("recreating the kafka producer and re-sending %s", episode_id)
                self.drop()
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
        return False
