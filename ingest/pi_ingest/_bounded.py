"""Tearing down a Kafka client without waiting on the broker: the one librdkafka call with no timeout.

Used by the producer (`_producer`) and the ack consumer (`_acks`) whenever they discard a
client. Every other call the uploader makes into confluent-kafka takes a timeout (poll, flush,
consume, list_topics) or never waits (produce raises BufferError; purge, see below). What has
none is a client's end: `rd_kafka_destroy` (run by the Python object's deallocation) and
`Consumer.close()` wait for librdkafka's threads, and those can wait on the broker
(librdkafka#4519: "rd_kafka_consumer_close/rd_kafka_destroy remain blocked indefinitely if
the broker is unreachable", open); `Producer.close()` flushes with an infinite timeout, so the
uploader never calls it. An uploader that stopped there stopped uploading (issue 32: 15 min in
`EpisodeProducer.drop()` with the broker starved).

So a client is ended on a daemon thread of its own and the caller waits at most
`close_timeout_s`; past that the client is abandoned to its thread, counted in
`pilake_uploader_kafka_stalls_total{call}`, and the caller goes on (the next send builds a
fresh client; the spool still holds every episode). Both native calls release the GIL while
they wait, so an abandoned thread never blocks the uploader's own. At most `MAX_ABANDONED`
abandoned clients are kept: beyond that `too_many_abandoned()` tells the caller to build no
new client until one ends, so a broker stuck for days costs a bounded amount of memory.

confluent-kafka's `Producer.purge(blocking=...)` passes RD_KAFKA_PURGE_F_NON_BLOCKING when
`blocking` is True (its default; `src/confluent_kafka/src/Producer.c`, all releases up to
2.16), and `purge()` holds the GIL: the uploader only ever calls `purge()` with its defaults,
which never waits for librdkafka's threads.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from pi_ingest._metrics import KAFKA_STALLS

logger = logging.getLogger("pi_ingest")

# Abandoned clients still alive at once before no new client is built: each holds a few
# threads and its queued messages (at most one episode, <= ~100 MB of wire chunks, usually
# a few MB); 4 keeps a robot's memory bounded while still trying a fresh client four times.
MAX_ABANDONED = 4

_lock = threading.Lock()
_abandoned: set[threading.Thread] = set()


def too_many_abandoned() -> bool:
    """True while `MAX_ABANDONED` or more client teardowns are still stuck in librdkafka."""
    with _lock:
        for thread in [t for t in _abandoned if not t.is_alive()]:
            _abandoned.discard(thread)
        return len(_abandoned) >= MAX_ABANDONED


def end_client(client: list[Any], end: Callable[[Any], object], *, call: str, timeout_s: float) -> bool:
    """End a Kafka client on a daemon thread; wait for it at most `timeout_s` seconds.

    Args:
        client: a one-item list holding the client, or None where there is none (nothing to
            end: True at once). The thread takes it out, so the caller keeps no reference and
            the client's deallocation (rd_kafka_destroy) runs on that thread, not the caller's:
            detach it in the same statement, `box, self._client = [self._client], None`.
        end: what ends it, e.g. `lambda c: c.close()`; errors are logged, never raised (the
            client is discarded either way).
        call: the label in `pilake_uploader_kafka_stalls_total` and in the log.
        timeout_s: how long the caller waits.

    Returns:
        True when the client ended within `timeout_s`; False when it was abandoned.

    Example:
        >>> end_client([consumer], lambda c: c.close(), call="consumer_close", timeout_s=10.0)
        True
    """

    if client[0] is None:
        return True

    def run() -> None:
        item = client.pop()
        try:
            end(item)
        except Exception as err:  # a fatal or closed client may refuse even this
            logger.debug("ignoring error while ending a kafka client (%s): %s", call, err)
        del item  # the last reference: rd_kafka_destroy runs here, on this thread

    thread = threading.Thread(target=run, name=f"pi-ingest-{call}", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if not thread.is_alive():
        return True
    with _lock:
        _abandoned.add(thread)
    KAFKA_STALLS.labels(call).inc()
    logger.warning(
        "kafka client teardown (%s) did not return within %.1f s (broker starved or gone?); "
        "left to a background thread, the uploader goes on with a fresh client",
        call,
        timeout_s,
    )
    return False
