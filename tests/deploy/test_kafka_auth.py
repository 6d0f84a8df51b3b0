"""Robots and jobs authenticate to Kafka with their own users and ACLs (issue 31, architecture
decision 13), checked on the manifests as the pinned Strimzi would apply them, and against the
clients as a deployment configures them.

No broker that enforces TLS and SCRAM with ACLs installs here (the local Tansu 0.6.0 enforces
SCRAM but can hold no user, serves no TLS and has no ACLs: tests/ingest/test_kafka_access.py),
so the clients' side is checked against the manifests' listener and user settings instead: the
settings a pod or robot resolves from its ConfigMap, Secret files and environment are the ones
the listener asks for (SASL_SSL, SCRAM-SHA-512, the cluster CA, the user whose ACLs fit), and
confluent-kafka (the uploader, the ack producer) and the Java client's translation (Flink's
Kafka source) accept them. The ACLs are evaluated with Kafka's rules (literal, prefix and `*`
resources; Read/Write/Alter/Delete imply Describe; All implies everything).
"""

from __future__ import annotations

import dataclasses
import datetime
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pi_format import ACK_TOPIC, RAW_TOPIC, AckRoutes, fleet_ack_topic
from pi_ingest import UploaderConfig
from pi_ingest._acks import ACK_GROUP_PREFIX
from pi_jobs import kafka_security
from pi_jobs.kafka_security import java_client_properties
from pi_jobs.settings import SETTINGS_KEYS, Settings
from pi_jobs.stream import stream_config
from pi_jobs.stream.config import StreamJobConfig

from tests.deploy._kustomize import render
from tests.deploy.test_k8s_schemas import EXAMPLE_ENV, K8S, schema_errors

ROBOT_ENV = K8S.parent / "robot" / "uploader.env.example"
SECRET = "not-a-real-password-8d1f"


def _objects() -> list[dict[str, Any]]:
    return render(K8S, files={"secrets.env": EXAMPLE_ENV})


def _one(kind: str, name: str | None = None) -> dict[str, Any]:
    found = [o for o in _objects() if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def _pilake_toml() -> dict[str, Any]:
    return tomllib.loads(_one("ConfigMap", "pilake-config")["data"]["pilake.toml"])


def _users() -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in _objects() if o["kind"] == "KafkaUser"}


# ---- Kafka's ACL rules -------------------------------------------------------------------------

_IMPLIES_DESCRIBE = {"Read", "Write", "Delete", "Alter", "Describe"}


@dataclass(frozen=True)
class Acls:
    """One KafkaUser's ACLs, evaluated as Kafka's StandardAuthorizer does for allow rules."""

    rules: tuple[dict[str, Any], ...]

    def allows(self, operation: str, resource: str, name: str = "kafka-cluster") -> bool:
        for rule in self.rules:
            assert rule.get("type", "allow") == "allow", "deny rules are not used here"
            res = rule["resource"]
            if res["type"] != resource:
                continue
            if resource != "cluster":
                pattern, kind = res["name"], res.get("patternType", "literal")
                prefixed = kind == "prefix" and name.startswith(pattern)
                if not (pattern == "*" or prefixed or name == pattern):
                    continue
            ops = set(rule["operations"])
            if "All" in ops or operation in ops or (operation == "Describe" and ops & _IMPLIES_DESCRIBE):
                return True
        return False


def _acls(user: str) -> Acls:
    spec = _users()[user]["spec"]
    assert spec["authorization"]["type"] == "simple"
    return Acls(tuple(spec["authorization"]["acls"]))


def test_the_acl_evaluator_follows_kafkas_rules() -> None:
    acls = Acls(
        (
            {"resource": {"type": "topic", "name": "a.", "patternType": "prefix"}, "operations": ["Write"]},
            {"resource": {"type": "group", "name": "g", "patternType": "literal"}, "operations": ["Read"]},
            {"resource": {"type": "topic", "name": "*"}, "operations": ["DescribeConfigs"]},
        )
    )  # fmt: skip
    assert acls.allows("Write", "topic", "a.b") and acls.allows("Describe", "topic", "a.b")
    assert not acls.allows("Read", "topic", "a.b") and not acls.allows("Write", "topic", "b.a")
    assert acls.allows("Read", "group", "g") and not acls.allows("Read", "group", "g2")
    assert acls.allows("DescribeConfigs", "topic", "anything") and not acls.allows("Describe", "cluster")


# ---- the broker's side -------------------------------------------------------------------------


def test_every_listener_authenticates_over_tls_and_acls_are_enforced() -> None:
    kafka = _one("Kafka")["spec"]["kafka"]
    assert kafka["authorization"]["type"] == "simple"
    listeners = kafka["listeners"]
    for listener in listeners:  # no way in without TLS and a user
        assert listener["tls"] is True, listener["name"]
        assert listener["authentication"]["type"] == "scram-sha-512", listener["name"]
    external = [lst for lst in listeners if lst["type"] != "internal"]
    assert [lst["type"] for lst in external] == ["loadbalancer"]  # robots outside the cluster
    assert external[0]["configuration"]["maxConnectionCreationRate"] > 0
    assert _one("Kafka")["spec"]["entityOperator"]["userOperator"] is not None  # makes the users


def test_the_validation_refuses_a_misspelt_acl() -> None:
    user = _users()["fleet-lab1"]
    user["spec"]["authorization"]["acls"][0]["operations"] = ["Writ"]
    assert any("is not one of" in e for e in schema_errors(user))
    user["spec"]["authentication"]["type"] = "scram-sha-256"  # Strimzi's users are SCRAM-SHA-512
    assert any("is not one of" in e for e in schema_errors(user))


def _fleet_users() -> dict[str, str]:
    """{fleet: KafkaUser name} for every fleet the stream job routes acks to."""
    routes = AckRoutes.parse(_pilake_toml()["stream"].get("ack_routes", ""))
    fleets = {fleet for _, fleet in routes.routes}
    assert fleets, "the manifests route no fleet: robots would all read one ack topic"
    return {fleet: f"fleet-{fleet}" for fleet in sorted(fleets)}


def test_each_fleet_writes_the_raw_topic_and_reads_only_its_own_acks() -> None:
    topics = {o["metadata"]["name"] for o in _objects() if o["kind"] == "KafkaTopic"}
    users = _users()
    for fleet, user in _fleet_users().items():
        assert user in users, f"fleet {fleet} routed in pilake.toml has no KafkaUser {user}"
        own = fleet_ack_topic(fleet)
        assert own in topics, f"no KafkaTopic {own}"
        acls = _acls(user)
        assert acls.allows("Write", "topic", RAW_TOPIC) and acls.allows("Describe", "topic", RAW_TOPIC)
        assert acls.allows("Read", "topic", own)
        assert acls.allows("Read", "group", f"{ACK_GROUP_PREFIX}0123abcd")  # the uploader's group id
        # and nothing else: not the raw topic's data, not the shared or another fleet's acks
        assert not acls.allows("Read", "topic", RAW_TOPIC)
        for other in (ACK_TOPIC, fleet_ack_topic(f"{fleet}x"), fleet_ack_topic("other-fleet")):
            assert not acls.allows("Read", "topic", other) and not acls.allows("Describe", "topic", other)
        assert not acls.allows("Write", "topic", own)  # cannot forge acks
        assert not acls.allows("Read", "group", "pilake-stream")  # cannot move the job's offsets
        for op in ("Create", "Alter", "AlterConfigs", "ClusterAction", "Describe"):
            assert not acls.allows(op, "cluster")
        assert users[user]["spec"]["quotas"]["producerByteRate"] > 0  # one fleet cannot starve the rest


def test_the_stream_job_user_reads_raw_and_writes_every_ack_topic_only() -> None:
    toml = _pilake_toml()
    user = toml["kafka"]["security"]["sasl.username"]
    acls = _acls(user)
    assert acls.allows("Read", "topic", RAW_TOPIC)
    routes = AckRoutes.parse(toml["stream"]["ack_routes"])
    for topic in routes.topics:
        assert acls.allows("Write", "topic", topic), topic
    # its groups: the offsets it commits, the lag probe, the held re-fetch (pi_jobs.stream)
    group_id = str({f.name: f.default for f in dataclasses.fields(StreamJobConfig)}["group_id"])
    for group in (group_id, "pilake-stream-lag-probe", "pilake-refetch-0f3c"):
        assert acls.allows("Read", "group", group), group
    assert not acls.allows("Write", "topic", RAW_TOPIC)  # cannot inject chunks
    assert not acls.allows("Read", "topic", ACK_TOPIC)
    assert not acls.allows("Read", "group", f"{ACK_GROUP_PREFIX}x")
    assert not acls.allows("Alter", "cluster") and not acls.allows("Create", "cluster")


def test_operators_have_an_admin_that_no_pod_mounts() -> None:
    acls = _acls("pilake-admin")
    assert acls.allows("Read", "topic", RAW_TOPIC) and acls.allows("Alter", "cluster")
    mounted = {
        v["secret"]["secretName"]
        for o in _objects()
        for v in _walk(o)
        if isinstance(v, dict) and "secret" in v and isinstance(v["secret"], dict)
    }
    assert "pilake-admin" not in mounted and "pilake-stream" in mounted


def _walk(node: Any) -> Any:
    yield node
    if isinstance(node, dict):
        for value in node.values():
            yield from _walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from _walk(value)


# ---- the clients' side -------------------------------------------------------------------------


def _ca_pem(tmp_path: Path) -> Path:
    """A self-signed CA certificate, as Strimzi's pilake-cluster-ca-cert holds (ca.crt)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "cluster-ca v0")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=365))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    path = tmp_path / "ca.crt"
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path


def _protocol(listener: dict[str, Any]) -> str:
    sasl = listener.get("authentication", {}).get("type", "").startswith("scram")
    return {(True, True): "SASL_SSL", (True, False): "SSL", (False, True): "SASL_PLAINTEXT"}.get(
        (listener["tls"], sasl), "PLAINTEXT"
    )


def _check_against_listener(options: dict[str, str], listener: dict[str, Any], user: str) -> None:
    assert options["security.protocol"] == _protocol(listener) == "SASL_SSL"
    assert options["sasl.mechanism"] == listener["authentication"]["type"].upper() == "SCRAM-SHA-512"
    assert options["sasl.username"] == user and user in _users()
    assert options["sasl.password"] == SECRET


def _producer_accepts(options: dict[str, str], bootstrap: str) -> None:
    """confluent-kafka builds its client from the options (it loads and parses the CA file now)."""
    from confluent_kafka import Producer

    producer = Producer({**options, "bootstrap.servers": bootstrap, "socket.timeout.ms": 1000})
    producer.flush(0)


def test_the_stream_job_resolves_what_the_internal_listener_and_its_user_ask(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    flink = _one("FlinkDeployment")["spec"]["podTemplate"]["spec"]
    (container,) = flink["containers"]
    env = {e["name"]: e for e in container["env"]}
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in flink["volumes"]}
    toml = _pilake_toml()
    security = toml["kafka"]["security"]
    # the password: a file from the Secret Strimzi makes for the job's KafkaUser (never a value)
    password_file = env["PILAKE_KAFKA_SASL_PASSWORD_FILE"]["value"]
    (secret_volume,) = [n for n, p in mounts.items() if password_file.startswith(p + "/")]
    secret = volumes[secret_volume]["secret"]
    assert secret["secretName"] == security["sasl.username"]
    assert {i["key"]: i["path"] for i in secret["items"]} == {"password": Path(password_file).name}
    assert "PILAKE_KAFKA_SASL_PASSWORD" not in env
    # the CA: the cluster CA's certificate, where ssl.ca.location says
    cluster = _one("Kafka")["metadata"]["name"]
    (ca_volume,) = [n for n, p in mounts.items() if security["ssl.ca.location"].startswith(p + "/")]
    ca = volumes[ca_volume]["secret"]
    assert ca["secretName"] == f"{cluster}-cluster-ca-cert"
    assert {i["key"]: i["path"] for i in ca["items"]} == {"ca.crt": Path(security["ssl.ca.location"]).name}

    # resolve the settings as the pod does, with the Secret's files in a temporary directory
    (tmp_path / "password").write_text(SECRET + "\n")
    ca_file = _ca_pem(tmp_path)
    text = _one("ConfigMap", "pilake-config")["data"]["pilake.toml"]
    config_file = tmp_path / "pilake.toml"
    config_file.write_text(text.replace(security["ssl.ca.location"], str(ca_file)))
    environ = {
        "PILAKE_HOME": str(tmp_path / "home"),
        "PILAKE_CONFIG": str(config_file),
        "PILAKE_KAFKA_SASL_PASSWORD_FILE": str(tmp_path / "password"),
    }
    settings = Settings.from_env(environ)
    (internal,) = [lst for lst in _one("Kafka")["spec"]["kafka"]["listeners"] if lst["type"] == "internal"]
    options = dict(settings.kafka.options)
    _check_against_listener(options, internal, "pilake-stream")
    assert options["ssl.ca.location"] == str(ca_file)
    assert settings.bootstrap_servers.endswith(f":{internal['port']}")
    config = stream_config(settings)
    _producer_accepts(dict(config.client_options), config.bootstrap_servers)  # the ack producer
    java = java_client_properties(config.client_options)  # Flink's Kafka source
    assert java["security.protocol"] == "SASL_SSL" and java["sasl.mechanism"] == "SCRAM-SHA-512"
    assert java["ssl.truststore.location"] == str(ca_file) and java["ssl.truststore.type"] == "PEM"
    assert java["sasl.jaas.config"].startswith("org.apache.kafka.common.security.scram.ScramLoginModule")
    # the secret shows nowhere but in the options themselves
    for shown in (repr(settings), repr(settings.kafka), repr(config), str(config)):
        assert SECRET not in shown
    job = _one("FlinkDeployment")["spec"]["job"]
    assert not any("password" in arg.lower() or "sasl" in arg.lower() for arg in job["args"])


def _robot_environment(tmp_path: Path) -> dict[str, str]:
    """deploy/robot/uploader.env.example, its two files placed in `tmp_path`."""
    environ = {}
    for line in ROBOT_ENV.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            name, _, value = line.partition("=")
            environ[name] = value
    assert kafka_security.ENV_PREFIX + "SASL_PASSWORD" not in environ, "a value, not a file"
    (tmp_path / "kafka-password").write_text(SECRET)
    ca = _ca_pem(tmp_path)
    environ["PILAKE_KAFKA_SASL_PASSWORD_FILE"] = str(tmp_path / "kafka-password")
    environ["PILAKE_KAFKA_SSL_CA_LOCATION"] = str(ca)
    environ["PILAKE_HOME"] = str(tmp_path / "home")
    return environ


def test_a_robot_resolves_what_the_external_listener_and_its_fleet_user_ask(tmp_path: Path) -> None:
    settings = Settings.from_env(_robot_environment(tmp_path))
    (external,) = [lst for lst in _one("Kafka")["spec"]["kafka"]["listeners"] if lst["type"] != "internal"]
    options = dict(settings.kafka.options)
    user = options["sasl.username"]
    _check_against_listener(options, external, user)
    assert settings.bootstrap_servers.endswith(f":{external['port']}")
    # the uploader as `pilake upload` builds it: the fleet's ack topic, the one its user may read
    config = UploaderConfig(
        settings.bootstrap_servers, tmp_path / "spool", ack_topic=settings.ack_topic,
        client_options=settings.kafka.options,
    )  # fmt: skip
    assert config.ack_topic == fleet_ack_topic(settings.fleet) != ACK_TOPIC
    acls = _acls(user)
    assert acls.allows("Read", "topic", config.ack_topic) and acls.allows("Write", "topic", config.raw_topic)
    assert user == _fleet_users()[settings.fleet]
    _producer_accepts(dict(config.client_options), config.bootstrap_servers)
    assert SECRET not in repr(config) and SECRET not in repr(settings)


def test_a_ca_file_that_is_no_certificate_fails_when_the_client_is_built(tmp_path: Path) -> None:
    from confluent_kafka import KafkaException

    environ = _robot_environment(tmp_path)
    Path(environ["PILAKE_KAFKA_SSL_CA_LOCATION"]).write_text("-----BEGIN CERTIFICATE-----\nAAAA\n")
    options = dict(Settings.from_env(environ).kafka.options)
    with pytest.raises(KafkaException, match=r"ssl\.ca\.location"):
        _producer_accepts(options, "127.0.0.1:1")


def test_the_robot_example_names_only_settings_pilake_reads() -> None:
    text = ROBOT_ENV.read_text()
    names = [line.partition("=")[0] for line in text.splitlines() if line and not line.startswith("#")]
    settings_env = {spec.env for spec in SETTINGS_KEYS}
    for name in names:
        if name.startswith(kafka_security.ENV_PREFIX):
            key = name.removeprefix(kafka_security.ENV_PREFIX).removesuffix("_FILE").lower().replace("_", ".")
            kafka_security._check_key(key, name)
        else:
            assert name in settings_env, name
