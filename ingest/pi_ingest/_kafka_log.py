"""Where librdkafka's own log lines go, for both Kafka clients of the uploader.

The producer (`_producer`) and the ack consumer (`_acks`) hand one shared `KafkaLog` to
confluent-kafka as their `logger` option.
"""

from __future__ import annotations

import logging


class KafkaLog:
    """Receives librdkafka's log lines (its `logger` option) and files them at DEBUG.

    librdkafka logs every failed reconnect at error level (hundreds of lines while a broker
    is down); the uploader reports what matters itself, once per episode, at WARNING.
    """

    def __init__(self) -> None:
        self._logger = logging.getLogger("pi_ingest.kafka")

    def log(self, level: int, msg: str, *args: object, **kwargs: object) -> None:
        self._logger.debug(msg, *args)
