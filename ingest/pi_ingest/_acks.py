"""The uploader's ack listener: the lake's acknowledgements -> confirmed (dropped) spool entries.

Last hop of the uploader. The stream job publishes an `Ack` on `episodes.ack.v1` after the
Delta commit or the quarantine write; a matching spooled episode is confirmed in the
`pi_ingest.spool` and so is never sent again. End offsets of the local broker are wrong, so
nothing here reads high watermarks; the consumer uses `assign()` from the beginning (no group
join), see ARCHITECTURE.md.
"""

from __future__ import annotations

import functools
import logging
import time
import uuid
from typing import Any

from pi_format.topics import Ack, AckStatus

from pi_ingest._access import access_error, is_access_error
from pi_ingest._bounded import end_client
from pi_ingest._config import UploaderConfig
from pi_ingest._kafka_log import KafkaLog
from pi_ingest._metrics import ACKED
from pi_ingest.spool import Spool

logger = logging.getLogger("pi_ingest")

# Group id prefix of the ack consumer (never joined, never committed); a fleet's Kafka user has
# Read on this prefix (deploy/k8s/kafka-users.yaml).
ACK_GROUP_PREFIX = "pi-ingest-acks-"


def _close_consumer(consumer: Any) -> None:
    consumer.close()


class AckListener:
    """Reads the ack topic and confirms the spooled episodes the acks name.

    `committed`/`quarantined` list the episode ids confirmed so far, in arrival order. Not
    thread-safe; the consumer is created on first use.

    Example:
        >>> listener = AckListener(config, spool, KafkaLog())
        >>> acks = listener.poll(5.0)
        >>> listener.committed
        ['sim0-r000-e00000']
    """

    def __init__(self, config: UploaderConfig, spool: Spool, kafka_log: KafkaLog) -> None:
        self.config = config
        self.spool = spool
        self._consumer: Any = None
        self._assigned = False
        self._kafka_logger = kafka_log
        self._refused: Any = None  # the broker's refusal (credentials, TLS, ACLs): see _access
        self._token = object()  # identifies the current consumer to error_cb
        self.committed: list[str] = []
        self.quarantined: list[str] = []

    def close(self) -> None:
        """Close the consumer, if one was created; returns within `close_timeout_s`.

        `Consumer.close()` has no timeout and may wait on the broker forever (librdkafka#4519),
        so it runs on a thread of its own and is abandoned there after `close_timeout_s`
        (`pi_ingest._bounded`).
        """
        box, self._consumer = [self._consumer], None  # the thread holds the last reference
        self._token = object()  # errors the old consumer still reports are not ours any more
        end_client(box, _close_consumer, call="consumer_close", timeout_s=self.config.close_timeout_s)

    def _get_consumer(self, metadata_timeout_s: float) -> Any:
        """The ack consumer, assigned to every partition from the beginning; None until the topic exists."""
        from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

        if self._consumer is None:
            conf: dict[str, Any] = {
                "bootstrap.servers": self.config.bootstrap_servers,
                # Needed by the client, never joined: assign() below skips the group protocol.
                "group.id": f"{ACK_GROUP_PREFIX}{uuid.uuid4().hex}",
                "enable.auto.commit": False,
                # After a broker restart our position is past the new log's end: start over.
                "auto.offset.reset": "earliest",
                "session.timeout.ms": 6000,
                "heartbeat.interval.ms": 1000,
                "fetch.wait.max.ms": 100,
                "logger": self._kafka_logger,
                "error_cb": functools.partial(self._on_error, self._token),
            }
            conf.update(self.config.client_options)
            self._consumer = Consumer(conf)
            self._assigned = False
        if not self._assigned:
            try:
                meta = self._consumer.list_topics(self.config.ack_topic, timeout=metadata_timeout_s)
            except KafkaException as exc:  # no metadata within the timeout: refused, or not up yet
                self._consumer.poll(0)  # serve error_cb, which records a refusal
                self._raise_if_refused(exc.args[0] if exc.args else None)
                logger.debug("ack topic %s: no metadata yet (%s)", self.config.ack_topic, exc)
                return None
            topic = meta.topics.get(self.config.ack_topic)
            if topic is not None:
                self._raise_if_refused(topic.error)  # TOPIC_AUTHORIZATION_FAILED: no Read ACL
            if topic is None or topic.error is not None or not topic.partitions:
                logger.debug("ack topic %s not available yet", self.config.ack_topic)
                return None
            self._consumer.assign(
                [TopicPartition(self.config.ack_topic, p, OFFSET_BEGINNING) for p in sorted(topic.partitions)]
            )
            self._assigned = True
        return self._consumer

    def _on_error(self, token: object, err: Any) -> None:
        if token is not self._token:  # from a consumer already closed
            return
        if is_access_error(err):
            self._refused = err
        logger.debug("ack consumer: kafka error: %s", err)

    def _raise_if_refused(self, err: Any = None) -> None:
        """Raise KafkaAccessError when the broker refused this consumer (now or in error_cb)."""
        refused = err if is_access_error(err) else self._refused
        if refused is None:
            return
        self._refused = None
        self.close()
        raise access_error(
            refused,
            client_options=self.config.client_options,
            bootstrap_servers=self.config.bootstrap_servers,
            topic=self.config.ack_topic,
            action="read",
        )

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
        ACKED.labels(ack.status.value).inc()
        if ack.status is AckStatus.QUARANTINED:
            # Durable in the quarantine table: nothing a re-send could fix, so it is done too.
            logger.warning("episode %s was quarantined by the lake: %s", ack.episode_id, ack.reason)
            self.quarantined.append(ack.episode_id)
        else:
            self.committed.append(ack.episode_id)
        return ack

    def poll(self, timeout_s: float) -> list[Ack]:
        """The work behind `Uploader.poll_acks` (see there): the acks that confirmed a spooled episode.

        Raises:
            KafkaAccessError: the broker refused the credentials, the TLS handshake or the Read
                ACL on the ack topic.
        """
        from confluent_kafka import KafkaError

        deadline = time.monotonic() + max(0.0, timeout_s)
        acks: list[Ack] = []
        while True:
            remaining = deadline - time.monotonic()
            # Every call below has a timeout: a poll returns within timeout_s plus one metadata
            # request (at most 5 s) whatever the broker does.
            consumer = self._get_consumer(min(5.0, max(0.5, remaining)))
            if consumer is None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                time.sleep(min(0.5, remaining))
                continue
            batch = consumer.consume(num_messages=1000, timeout=max(0.0, min(remaining, 0.5)))
            self._raise_if_refused()
            for msg in batch:
                if msg.error() is not None:
                    self._raise_if_refused(msg.error())
                    if msg.error().code() != KafkaError._PARTITION_EOF:
                        logger.debug("ack consumer error: %s", msg.error())
                    continue
                ack = self._handle_ack(msg.value())
                if ack is not None:
                    acks.append(ack)
            if remaining <= 0 or len(self.spool) == 0 or (acks and not batch):
                break
        return acks
