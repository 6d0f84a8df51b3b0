"""Kafka security settings (SASL/TLS) from the environment or a properties file, for every client.

Sources, later ones win:
1. a properties file: `$PILAKE_KAFKA_CONFIG`, else `<PILAKE_HOME>/kafka.properties` if it exists
   (`key=value` lines, `#`/`!` comments; librdkafka key names);
2. environment variables `PILAKE_KAFKA_<KEY>`, the key upper-cased with dots as underscores:
   `PILAKE_KAFKA_SECURITY_PROTOCOL=SASL_SSL`, `PILAKE_KAFKA_SASL_PASSWORD=...`.
Only security keys are accepted (`security.protocol`, `sasl.*`, `ssl.*`): a typo'd or unrelated
setting is an error, not something silently sent to the broker.

The options are in librdkafka's names (confluent-kafka: uploader, ack consumer, admin, the
sink's ack producer). Flink's Kafka connector is the Java client, which names some settings
differently; `java_client_properties` translates them. Values are secrets: reprs show only the
keys, and error messages never include a value.
"""

from __future__ import annotations

import os
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pi_jobs.errors import PiJobsError

ENV_PREFIX = "PILAKE_KAFKA_"
CONFIG_ENV = "PILAKE_KAFKA_CONFIG"
_ALLOWED_PREFIXES = ("sasl.", "ssl.")
_ALLOWED_KEYS = frozenset({"security.protocol"})
_PROTOCOLS = frozenset({"PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"})
# librdkafka key -> Java client key, where the Java client has a direct equivalent
_JAVA_RENAMES = {
    "ssl.ca.location": "ssl.truststore.location",
    "ssl.endpoint.identification.algorithm": "ssl.endpoint.identification.algorithm",
    "security.protocol": "security.protocol",
    "sasl.mechanism": "sasl.mechanism",
    "sasl.mechanisms": "sasl.mechanism",
}
_JAAS_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}


class KafkaSecurityError(PiJobsError, ValueError):
    """Kafka security settings are malformed (the message names the key, never the value)."""


# Java-client-only names: librdkafka refuses them, and both clients get the options.
_JAVA_ONLY_PREFIXES = ("sasl.jaas.", "ssl.truststore.", "ssl.keystore.type")


def _check_key(key: str, where: str) -> None:
    if key.startswith(_JAVA_ONLY_PREFIXES):
        raise KafkaSecurityError(
            f"{where}: {key!r} is a Java-client name that librdkafka rejects; use the librdkafka names "
            "(sasl.username, sasl.password, ssl.ca.location), which pi-lake translates for Flink"
        )
    if key in _ALLOWED_KEYS or key.startswith(_ALLOWED_PREFIXES):
        return
    raise KafkaSecurityError(
        f"{where}: {key!r} is not a Kafka security setting; allowed are security.protocol, sasl.*, "
        "ssl.* (librdkafka names); other client settings are chosen by pi-lake"
    )


@dataclass(frozen=True, slots=True)
class KafkaSecurity:
    """librdkafka security options for every Kafka client of an installation.

    Example:
        >>> sec = KafkaSecurity({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
        ...                      "sasl.username": "robot", "sasl.password": "s3cret"})
        >>> sec
        KafkaSecurity(keys=['sasl.mechanism', 'sasl.password', 'sasl.username', 'security.protocol'])
    """

    options: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for key, value in self.options.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise KafkaSecurityError(f"Kafka security options must map str to str; key {key!r} does not")
            _check_key(key, "Kafka security options")
            if "\x00" in value:  # librdkafka takes C strings: it would use the value cut there
                raise KafkaSecurityError(
                    f"Kafka security option {key!r} contains a NUL byte, where librdkafka would cut "
                    "it off; check where the value comes from (a binary file named by a _FILE variable?)"
                )
        protocol = self.options.get("security.protocol")
        if protocol is not None and protocol.upper() not in _PROTOCOLS:
            raise KafkaSecurityError(
                f"security.protocol must be one of {sorted(_PROTOCOLS)}, got {protocol!r}"
            )
        object.__setattr__(self, "options", types.MappingProxyType(dict(self.options)))

    def __repr__(self) -> str:
        return f"KafkaSecurity(keys={sorted(self.options)!r})"

    __str__ = __repr__

    def __bool__(self) -> bool:
        return bool(self.options)

    @classmethod
    def from_sources(cls, environ: Mapping[str, str], home: Path) -> KafkaSecurity:
        """Read the properties file and the PILAKE_KAFKA_* variables (see the module docstring)."""
        options: dict[str, str] = {}
        path_text = environ.get(CONFIG_ENV)
        path = Path(path_text) if path_text else home / "kafka.properties"
        if path_text and not path.is_file():
            raise KafkaSecurityError(
                f"{CONFIG_ENV}={path_text!r} is not a file; point it at a kafka.properties file"
            )
        if path.is_file():
            options.update(read_properties(path))
        for name, value in environ.items():
            if name.startswith(ENV_PREFIX) and name != CONFIG_ENV:
                key = name.removeprefix(ENV_PREFIX).lower().replace("_", ".")
                _check_key(key, f"environment variable {name}")
                options[key] = value
        return cls(options)

    def java_properties(self) -> dict[str, str]:
        """The same settings for the Java Kafka client (Flink's connector)."""
        return java_client_properties(self.options)


def read_properties(path: Path) -> dict[str, str]:
    """`key=value` (or `key: value`) lines of a Java-style properties file, comments skipped."""
    out: dict[str, str] = {}
    for number, raw in enumerate(path.read_text().splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith(("#", "!")):
            continue
        sep = min((i for i in (line.find("="), line.find(":")) if i > 0), default=-1)
        if sep < 0:
            raise KafkaSecurityError(f"{path}:{number}: expected 'key=value', found a line without '='")
        key = line[:sep].strip()
        _check_key(key, f"{path}:{number}")
        out[key] = line[sep + 1 :].strip()
    return out


def _jaas_quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def java_client_properties(options: Mapping[str, str]) -> dict[str, str]:
    """Translate librdkafka security options to the Java client's names.

    `sasl.username`/`sasl.password` become a `sasl.jaas.config` for PLAIN and SCRAM;
    `ssl.ca.location` becomes a PEM truststore. Keys with no translation are passed as they are
    (the Java client ignores unknown keys with a warning that names the key only), unless they
    are librdkafka-only client-certificate settings, which raise: silently dropping them would
    connect without the certificate.

    Raises:
        KafkaSecurityError: a line break in sasl.username or sasl.password (the JAAS parser of
            the Java client cannot take one).
        NotImplementedError: mutual TLS (`ssl.certificate.location`/`ssl.key.location`) for the
            Java client: give it a keystore through `ssl.keystore.*` keys instead.

    Example:
        >>> java_client_properties({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
        ...                         "sasl.username": "u", "sasl.password": "p"})["sasl.jaas.config"]
        'org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="p";'
    """
    out: dict[str, str] = {}
    for key, value in options.items():
        if key in ("sasl.username", "sasl.password"):
            continue
        if key in ("ssl.certificate.location", "ssl.key.location", "ssl.key.password"):
            raise NotImplementedError(
                f"{key} (mutual TLS) has no automatic translation for Flink's Java Kafka client; "
                "set ssl.keystore.location/ssl.keystore.type/ssl.keystore.password as well and leave "
                f"{key} out of the stream job's options"
            )
        out[_JAVA_RENAMES.get(key, key)] = value
    if "ssl.ca.location" in options:
        out["ssl.truststore.type"] = "PEM"
    if "sasl.username" in options or "sasl.password" in options:
        mechanism = options.get("sasl.mechanism", options.get("sasl.mechanisms", "GSSAPI")).upper()
        module = _JAAS_MODULES.get(mechanism)
        if module is None:
            raise NotImplementedError(
                f"sasl.username/sasl.password with sasl.mechanism {mechanism!r}: only PLAIN and SCRAM "
                "are translated for Flink's Java client"
            )
        for key in ("sasl.username", "sasl.password"):
            if any(c in options.get(key, "") for c in "\r\n"):
                # Kafka's JAAS parser ends a quoted value at a line break, and its error then
                # names the rest of the value as a key: the password's tail would be logged
                raise KafkaSecurityError(
                    f"{key} contains a line break, which Flink's Java Kafka client cannot take "
                    "(its JAAS parser would fail and show part of the value); remove it from the "
                    "secret (a _FILE's one trailing newline is already dropped)"
                )
        user = _jaas_quote(options.get("sasl.username", ""))
        password = _jaas_quote(options.get("sasl.password", ""))
        out["sasl.jaas.config"] = f"{module} required username={user} password={password};"
    return out


def security_from_env(home: Path, environ: Mapping[str, str] | None = None) -> KafkaSecurity:
    """KafkaSecurity of an installation whose state lives in `home`."""
    return KafkaSecurity.from_sources(os.environ if environ is None else environ, home)
