"""The sink's end-to-end acknowledgements to uploaders (the ack topic, or the topic of the
episode's robot fleet: pi_format.AckRoutes), best effort."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from typing import Any

from pi_format import Ack, AckRoutes

log = logging.getLogger("pi_jobs.stream")


class AckPublisher:
    """Publishes `Ack`s to the ack topic, recreating its producer when it breaks.

    Example:
        >>> acks = AckPublisher("127.0.0.1:19092", "episodes.ack.v1", {})
        >>> acks.send(Ack("r1-000001", AckStatus.COMMITTED, attempt_id, time.time_ns()))
    """

    def __init__(
        self, bootstrap_servers: str, ack_topic: str | AckRoutes, client_options: Mapping[str, str]
    ) -> None:
        """`ack_topic`: one topic for every ack, or `AckRoutes` that give each robot fleet its
        own (a fleet's Kafka user may read only its topic: deploy/k8s/kafka-users.yaml)."""
        self._bootstrap_servers = bootstrap_servers
        self._routes = ack_topic if isinstance(ack_topic, AckRoutes) else AckRoutes(default=ack_topic)
        self._client_options = dict(client_options)
        self.producer = self._new_producer()

    def _new_producer(self) -> Any:
        from confluent_kafka import Producer

        # Not idempotent on purpose: an ack repeated is harmless, while an idempotent producer
        # livelocks on UNKNOWN_PRODUCER_ID after a broker restart (see ARCHITECTURE, Kafka notes).
        return Producer(
            {
                **self._client_options,
                "bootstrap.servers": self._bootstrap_servers,
                "acks": "all",
                "linger.ms": 0,
                "message.timeout.ms": 15000,
            }
        )

    def send(self, ack: Ack) -> None:
        """Tell the uploader; best effort, because the lake commit has already happened.

        A lost ack only delays confirmation: the uploader re-sends the episode, the job sees
        an already-committed episode and acks again. Failing the job here instead would spend
        one of its bounded Flink restarts on a broker hiccup.
        """
        failed: list[str] = []

        def on_delivery(err: Any, _msg: Any) -> None:
            if err is not None:
                failed.append(str(err))

        topic = self._routes.topic_for(ack.episode_id)
        try:
            self.producer.produce(
                topic,
                key=ack.episode_id.encode(),
                value=ack.encode(),
                on_delivery=on_delivery,
            )
            left = self.producer.flush(20)
        except Exception as err:  # BufferError or a KafkaException from a broken producer
            failed.append(repr(err))
            left = 1
        if left or failed:
            log.warning(
                "ack for %s (%s) not delivered to %s (%s); recreating the ack producer, "
                "the uploader's re-send will be acked again",
                ack.episode_id,
                ack.status,
                topic,
                "; ".join(failed) or f"{left} still queued",
            )
            with contextlib.suppress(Exception):
                self.producer.purge()
            self.producer = self._new_producer()

    def flush(self, timeout_s: float) -> None:
        self.producer.flush(timeout_s)
