"""Which Kafka errors mean "the broker refuses this client", and the message that says so.

Shared by the uploader's producer (`pi_ingest._producer`) and its ack listener (`pi_ingest._acks`):
a wrong password, an unknown user, a CA that does not sign the broker's certificate or a missing
ACL is not a network hiccup, and retrying it forever (re-sending every `resend_after_s`) would
hide it. The message names the user and mechanism, never the password, and the settings to check.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pi_ingest.errors import KafkaAccessError


def _codes() -> dict[int, str]:
    from confluent_kafka import KafkaError

    return {
        KafkaError._AUTHENTICATION: "authentication failed",
        KafkaError.SASL_AUTHENTICATION_FAILED: "authentication failed",
        KafkaError._SSL: "TLS handshake failed",
        KafkaError.TOPIC_AUTHORIZATION_FAILED: "not authorized for the topic",
        KafkaError.GROUP_AUTHORIZATION_FAILED: "not authorized for the consumer group",
        KafkaError.CLUSTER_AUTHORIZATION_FAILED: "not authorized for the cluster operation",
    }


def is_access_error(err: Any) -> bool:
    """Whether a confluent-kafka `KafkaError` is a refusal by the broker (see the module doc)."""
    try:
        return int(err.code()) in _codes()
    except (AttributeError, TypeError, ValueError):
        return False


def access_error(
    err: Any, *, client_options: Mapping[str, str], bootstrap_servers: str, topic: str, action: str
) -> KafkaAccessError:
    """The `KafkaAccessError` for `err`, naming who was refused, what for, and what to check.

    Example:
        >>> raise access_error(err, client_options=opts, bootstrap_servers="k:9094",
        ...                    topic="episodes.raw.v1", action="write to")
    """
    kind = _codes().get(int(err.code()), "refused")
    user = client_options.get("sasl.username")
    mechanism = client_options.get("sasl.mechanism", client_options.get("sasl.mechanisms", ""))
    protocol = client_options.get("security.protocol", "PLAINTEXT")
    who = f"user {user!r} ({mechanism or 'SASL'}, {protocol})" if user else f"no credentials ({protocol})"
    if "authorized" in kind:
        fix = (
            f"ask the Kafka operator to grant this user the ACLs to {action} {topic} "
            "(deploy/k8s/kafka-users.yaml)"
        )
    elif "TLS" in kind:
        fix = "check PILAKE_KAFKA_SSL_CA_LOCATION: it must be the CA that signed the broker's certificate"
    else:
        fix = (
            "check PILAKE_KAFKA_SASL_USERNAME, PILAKE_KAFKA_SASL_PASSWORD or ..._PASSWORD_FILE and "
            "PILAKE_KAFKA_SASL_MECHANISM (the Kafka user's secret)"
        )
    # err.str() is librdkafka's text: it names the broker and the mechanism, never the password
    return KafkaAccessError(
        f"Kafka at {bootstrap_servers} refused {who} to {action} {topic}: {kind} ({err.str()}); "
        f"{fix}. Nothing is lost: the episodes stay in the spool"
    )
