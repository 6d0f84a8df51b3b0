"""Every Kafka client of pi-lake through a real TLS handshake (issue 31): the uploader and its ack
listener (librdkafka), the stream job's Kafka source (Flink's Java client, with the PEM
truststore `java_client_properties` makes from `ssl.ca.location`) and its ack producer, each
verifying the broker's certificate against a CA made here, as a deployment's clients verify
Strimzi's cluster CA. A client given another CA is refused with a clear error.

The TLS listener is a test double (tests/fixtures/tls_proxy.py): the local Tansu 0.6.0 serves no
TLS, so a TLS terminator in front of it stands in for the broker's listener. SCRAM on top of TLS
cannot run here (that Tansu build can hold no user: tests/ingest/test_kafka_access.py).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from pi_ingest import Uploader, UploaderConfig
from pi_ingest.errors import KafkaAccessError
from pi_jobs.settings import Settings

from tests.fixtures.tls_proxy import TlsBroker, make_pki
from tests.jobs.test_stream_job import _episode

integration = pytest.mark.integration


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsBroker]:
    root = tmp_path_factory.mktemp("tls-broker")
    with TlsBroker(make_pki(root / "pki"), root) as broker:
        yield broker


def _tls(broker: TlsBroker, ca: Path | None = None) -> dict[str, str]:
    return {"security.protocol": "SSL", "ssl.ca.location": str(ca or broker.pki.ca)}


@integration
def test_upload_stream_job_and_acks_all_through_tls(
    tls_broker: TlsBroker, stack_settings: Settings, tmp_path: Path
) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    from pi_jobs.stream import run_stream_job

    from tests.fixtures.stream_jobs import small_stream_job

    options = _tls(tls_broker)
    run = uuid.uuid4().hex[:8]
    raw_topic, ack_topic = f"tls-raw-{run}", f"tls-ack-{run}"
    admin = AdminClient({**options, "bootstrap.servers": tls_broker.bootstrap})
    for future in admin.create_topics(
        [NewTopic(raw_topic, num_partitions=2, replication_factor=1), NewTopic(ack_topic, 1, 1)]
    ).values():
        future.result(timeout=30)
    episodes = [_episode(i) for i in range(2)]
    config = UploaderConfig(
        tls_broker.bootstrap, tmp_path / "spool", raw_topic=raw_topic, ack_topic=ack_topic,
        client_options=options,
    )  # fmt: skip
    with Uploader(config) as up:
        for episode in episodes:
            up.submit(episode)
        assert up.send_pending() > 0
    job = small_stream_job(
        broker=tls_broker.bootstrap, root=tmp_path, jar_dir=stack_settings.jar_dir, raw_topic=raw_topic,
        ack_topic=ack_topic, group_id=f"tls-group-{run}", client_options=options,
    )  # fmt: skip
    report = run_stream_job(job, until_idle=True, idle_timeout_s=5.0, max_runtime_s=300)
    assert report.episodes_committed == 2  # the Java source read both through TLS
    with Uploader(config) as up:  # the acks, published and read through TLS
        deadline = time.monotonic() + 60
        while len(up.spool) and time.monotonic() < deadline:
            up.poll_acks(1.0)
        assert len(up.spool) == 0
        assert sorted(up._acks.committed) == sorted(e.episode_id for e in episodes)
    assert tls_broker.handshake_failures == 0


@integration
def test_a_client_that_does_not_trust_the_brokers_ca_is_refused_clearly(
    tls_broker: TlsBroker, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    other = make_pki(tmp_path / "other", name="another-ca")
    config = UploaderConfig(
        tls_broker.bootstrap, tmp_path / "spool", client_options=_tls(tls_broker, other.ca),
        delivery_timeout_s=10.0, send_rounds=2,
    )  # fmt: skip
    with Uploader(config) as up:
        up.submit(_episode(5))
        with pytest.raises(KafkaAccessError, match="TLS handshake failed") as info:
            up.send_pending()
        assert len(up.spool) == 1  # nothing lost
    assert "PILAKE_KAFKA_SSL_CA_LOCATION" in str(info.value)
    assert "no credentials (SSL)" in str(info.value)
