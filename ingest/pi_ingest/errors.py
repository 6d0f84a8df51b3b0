"""Exceptions of pi_ingest: one root, so callers can catch everything the uploader raises.

Errors from pi_format (e.g. a `ProtocolError` for a damaged bundle) are wrapped with `from err`
so the original reason stays attached.
"""

from __future__ import annotations


class PiIngestError(Exception):
    """Root of every error pi_ingest raises."""


class SpoolError(PiIngestError):
    """The spool directory is inconsistent, or an episode id is re-used with different bytes.

    Example:
        >>> try:
        ...     spool.add("r1-000001", other_messages)
        ... except SpoolError as err:
        ...     print(err)
    """


class BundleError(PiIngestError):
    """A bundle file handed to `Uploader.submit_bundle` is not one whole, valid episode."""


class KafkaAccessError(PiIngestError):
    """The broker refused the uploader: its credentials (SASL), its CA (TLS), or its Kafka user's
    ACLs (no Write on the raw topic, no Read on its ack topic). Retrying cannot fix that, so the
    uploader stops and says which; the spooled episodes stay on disk for the next run.

    Example:
        >>> try:
        ...     up.send_pending()
        ... except KafkaAccessError as err:
        ...     print(err)  # names the user, the broker's reason and the settings to check
    """
