"""Security basics: Kafka SASL/TLS settings reach every client and never show; SQL takes parameters."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from pi_ingest.uploader import UploaderConfig
from pi_jobs.cli import main
from pi_jobs.kafka_security import (
    KafkaSecurity,
    KafkaSecurityError,
    java_client_properties,
    read_properties,
)
from pi_jobs.settings import Settings
from pi_jobs.stream import stream_config

SECRET = "s3cret-Pa55-do-not-log"
SASL_ENV = {
    "PILAKE_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
    "PILAKE_KAFKA_SASL_MECHANISM": "PLAIN",
    "PILAKE_KAFKA_SASL_USERNAME": "robot-7",
    "PILAKE_KAFKA_SASL_PASSWORD": SECRET,
}


def test_settings_read_env_and_properties_file_env_wins(tmp_path):
    (tmp_path / "kafka.properties").write_text(
        "# fleet credentials\nsecurity.protocol=SASL_SSL\nsasl.mechanism = SCRAM-SHA-512\n"
        "sasl.username=from-file\n! another comment\nssl.ca.location: /etc/ca.pem\n"
    )
    env = {"PILAKE_HOME": str(tmp_path), "PILAKE_KAFKA_SASL_USERNAME": "from-env"}
    options = dict(Settings.from_env(env).kafka.options)
    assert options == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "from-env",
        "ssl.ca.location": "/etc/ca.pem",
    }
    other = tmp_path / "elsewhere.properties"
    other.write_text("sasl.password=x\n")
    env = {"PILAKE_HOME": str(tmp_path), "PILAKE_KAFKA_CONFIG": str(other)}
    assert dict(Settings.from_env(env).kafka.options) == {"sasl.password": "x"}
    with pytest.raises(KafkaSecurityError, match="is not a file"):
        Settings.from_env({"PILAKE_HOME": str(tmp_path), "PILAKE_KAFKA_CONFIG": str(tmp_path / "nope")})
    assert not Settings.from_env({"PILAKE_HOME": str(tmp_path / "empty")}).kafka


@pytest.mark.parametrize(
    ("key", "match"),
    [
        ("acks", "not a Kafka security setting"),
        ("bootstrap.servers", "not a Kafka security setting"),
        ("sasl.jaas.config", "Java-client name"),
        ("ssl.truststore.location", "Java-client name"),
    ],
)
def test_only_security_keys_in_librdkafka_names_are_accepted(key, match, tmp_path):
    with pytest.raises(KafkaSecurityError, match=match) as err:
        KafkaSecurity({key: SECRET})
    assert SECRET not in str(err.value)
    path = tmp_path / "k.properties"
    path.write_text(f"{key}={SECRET}\n")
    with pytest.raises(KafkaSecurityError, match=rf"k.properties:1: .*{match}") as err:
        read_properties(path)
    assert SECRET not in str(err.value)
    with pytest.raises(KafkaSecurityError, match=r"security\.protocol must be one of"):
        KafkaSecurity({"security.protocol": "SASL_PLAIN"})


def test_secrets_never_in_reprs(tmp_path):
    settings = Settings.from_env({"PILAKE_HOME": str(tmp_path), **SASL_ENV})
    assert settings.kafka.options["sasl.password"] == SECRET
    for obj in (settings, settings.kafka, stream_config(settings)):
        assert SECRET not in repr(obj) and SECRET not in str(obj)
    uploader = UploaderConfig("127.0.0.1:1", tmp_path / "spool", client_options=settings.kafka.options)
    assert SECRET not in repr(uploader)
    assert "sasl.password" in repr(settings)  # the key is shown, so an operator sees it is set


def test_clients_get_the_options(tmp_path):
    settings = Settings.from_env({"PILAKE_HOME": str(tmp_path), **SASL_ENV})
    assert dict(stream_config(settings).client_options) == dict(settings.kafka.options)
    java = java_client_properties(settings.kafka.options)
    assert java == {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="robot-7" password="{SECRET}";',
    }


def test_java_translation_escapes_and_refuses_what_it_cannot_translate():
    java = java_client_properties(
        {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.username": 'we"ird\\user',
            "sasl.password": "p",
            "ssl.ca.location": "/etc/ca.pem",
        }
    )
    assert java["sasl.jaas.config"].startswith("org.apache.kafka.common.security.scram.ScramLoginModule")
    assert 'username="we\\"ird\\\\user"' in java["sasl.jaas.config"]
    assert java["ssl.truststore.location"] == "/etc/ca.pem" and java["ssl.truststore.type"] == "PEM"
    with pytest.raises(NotImplementedError, match="mutual TLS"):
        java_client_properties({"ssl.certificate.location": "/c.pem"})
    with pytest.raises(NotImplementedError, match="GSSAPI"):
        java_client_properties({"sasl.mechanism": "GSSAPI", "sasl.username": "u"})


def test_cli_never_prints_or_logs_the_secret(tmp_path, monkeypatch, capsys, caplog):
    monkeypatch.setenv("PILAKE_HOME", str(tmp_path))
    monkeypatch.setenv("PILAKE_BROKER_PORT", "1")  # nothing listens: status reports it down
    for name, value in SASL_ENV.items():
        monkeypatch.setenv(name, value)
    with caplog.at_level(logging.DEBUG):
        main(["-v", "status"])
        main(["sql", "SELECT {p:String} AS x", "--params", '{"p": "ok"}'])
    out = capsys.readouterr()
    assert SECRET not in out.out + out.err + caplog.text


@pytest.mark.integration
def test_sasl_client_against_the_plaintext_broker_fails_loudly(broker):
    """A SASL setting is applied, not silently dropped: the plaintext broker refuses the client."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    plain = AdminClient({"bootstrap.servers": broker})
    assert plain.list_topics(timeout=10).topics is not None
    sasl = AdminClient(
        {
            "bootstrap.servers": broker,
            **KafkaSecurity(
                {k.removeprefix("PILAKE_KAFKA_").lower().replace("_", "."): v for k, v in SASL_ENV.items()}
            ).options,
        }
    )
    with pytest.raises(KafkaException):
        sasl.list_topics(timeout=5)


def test_hostile_strings_are_parameters_or_rejected(tmp_path):
    pytest.importorskip("chdb")
    from pi_catalog import Catalog
    from pi_jobs.ops.validation import ValidationSetupError, validate_table

    from tests.fixtures import lake_factory as lf

    lake = lf.write_lake(tmp_path / "lake", episodes=2, steps=3, cameras=("c",), size=(16, 16))
    catalog = Catalog(str(tmp_path / "catalog"))
    assert catalog.rebuild_from_lake(lake.layout) == 2
    hostile = "ep-000' OR '1'='1"
    sql = "SELECT episode_id FROM episodes WHERE episode_id = {e:String}"
    assert catalog.episode_ids(sql, {"e": hostile}) == []
    assert catalog.episode_ids(sql, {"e": "x'); DROP TABLE episodes_index; --"}) == []
    assert catalog.episode_ids(sql, {"e": "ep-001"}) == ["ep-001"]
    assert sorted(catalog.episode_ids("SELECT episode_id FROM episodes")) == ["ep-000", "ep-001"]
    with pytest.raises(ValidationSetupError, match="no expectation suite"):
        validate_table(lake.layout.root, "episodes; DROP TABLE x", validation_dir=Path(tmp_path / "v"))


def test_a_nul_byte_in_a_secret_is_refused_without_showing_it(tmp_path):
    # librdkafka would silently use the password cut at the NUL (found by issue 31's hostile
    # credentials): refuse it, naming the key only
    with pytest.raises(KafkaSecurityError, match=r"'sasl\.password' contains a NUL byte") as info:
        KafkaSecurity({"sasl.password": f"ok\x00{SECRET}"})
    assert SECRET not in str(info.value)
    (tmp_path / "pw").write_bytes(b"ok\x00" + SECRET.encode())
    with pytest.raises(KafkaSecurityError, match="NUL byte"):
        env = {"PILAKE_HOME": str(tmp_path), "PILAKE_KAFKA_SASL_PASSWORD_FILE": str(tmp_path / "pw")}
        Settings.from_env(env)


def _hostile_secrets(seed: int, count: int) -> list[str]:
    import random

    rng = random.Random(seed)
    pieces = ['"', "\\", ";", "'", "=", ",", " ", "\t", "\u00e9", "\U0001f916", "/*", "*/", "//", "{", "}",
              "required", "\x01", "\x7f", "a" * 200]  # fmt: skip
    return [SECRET + "".join(rng.choice(pieces) for _ in range(rng.randint(1, 8))) for _ in range(count)]


@pytest.mark.integration
def test_the_java_clients_jaas_parser_reads_back_every_password_exactly(stack_settings):
    # Flink's Kafka source gets sasl.jaas.config (java_client_properties); Kafka's own parser
    # (JaasContext, kafka-clients from the connector jars) must read back the exact user and
    # password, for quotes, backslashes, comments, braces and the like
    import base64
    import subprocess
    from pathlib import Path

    import pyflink
    from pi_jobs.stream.connector_jars import ensure_connector_jars

    jars = ensure_connector_jars(stack_settings.jar_dir)
    slf4j = Path(pyflink.__file__).parent / "lib" / "flink-dist-2.0.2.jar"  # JaasContext logs
    classpath = ":".join([*(str(j) for j in jars if "kafka-clients" in j.name), str(slf4j)])
    check = Path(__file__).parents[1] / "fixtures" / "jaas" / "JaasCheck.java"
    users = ["fleet-lab1", 'we"ird\\user']
    passwords = ["p", *_hostile_secrets(seed=31, count=40)]
    pairs = [(u, p) for u in users for p in passwords]
    texts = [
        java_client_properties({"sasl.mechanism": "SCRAM-SHA-512", "sasl.username": u, "sasl.password": p})[
            "sasl.jaas.config"
        ]
        for u, p in pairs
    ]
    out = subprocess.run(
        ["java", "-cp", classpath, str(check)],
        input="".join(base64.b64encode(t.encode()).decode() + "\n" for t in texts),
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    lines = out.stdout.splitlines()
    assert len(lines) == len(pairs), out.stderr[-2000:]
    for (user, password), line in zip(pairs, lines, strict=True):
        status, payload = line.split(" ", 1)
        assert status == "OK", base64.b64decode(payload).decode()
        module, got_user, got_password = base64.b64decode(payload).decode().split("\0")
        assert module == "org.apache.kafka.common.security.scram.ScramLoginModule"
        assert (got_user, got_password) == (user, password)


@pytest.mark.parametrize("key", ["sasl.password", "sasl.username"])
@pytest.mark.parametrize("value", [f"a\n{SECRET}", f"{SECRET}\r\n", "\n"])
def test_a_line_break_the_java_client_cannot_take_is_refused_without_the_value(key, value):
    # Kafka's JAAS parser ends a quoted value at a line break and then names the rest as a key
    # ("Value not specified for key '<the password's tail>'"): refuse it before Flink sees it
    options = {"sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "u", "sasl.password": "p", key: value}
    with pytest.raises(KafkaSecurityError, match=f"{key.replace('.', '[.]')} contains a line break") as info:
        java_client_properties(options)
    assert SECRET not in str(info.value)
