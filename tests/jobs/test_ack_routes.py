"""Acks per robot fleet (issue 31): the stream job's ack publisher sends each ack to the topic of
the episode's fleet (pi_format.AckRoutes), so a fleet's uploader, whose Kafka user may read only
`episodes.ack.v1.<fleet>` (deploy/k8s/kafka-users.yaml), gets its own acks and no other fleet's.
Through the session's real broker; the publisher is the one the sink uses."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from pi_format import ACK_TOPIC, Ack, AckRoutes, AckStatus, fleet_ack_topic
from pi_ingest import Uploader, UploaderConfig
from pi_jobs.settings import Settings
from pi_jobs.stream import stream_config
from pi_jobs.stream._acks import AckPublisher
from pi_jobs.stream.job import config_from_json, config_to_json

from tests.ingest.test_uploader import _episodes

integration = pytest.mark.integration


@integration
def test_each_fleet_gets_only_its_own_acks(broker: str, tmp_path: Path) -> None:
    fleet_a, shared = _episodes(seed=4101, count=1)[0], _episodes(seed=4102, count=1)[0]
    routes = AckRoutes.parse(f"{fleet_a.meta.robot_id}=fleet-a")
    assert routes.topic_for(fleet_a.episode_id) == fleet_ack_topic("fleet-a")
    assert routes.topic_for(shared.episode_id) == ACK_TOPIC
    publisher = AckPublisher(broker, routes, {})
    for episode in (fleet_a, shared):
        publisher.send(Ack(episode.episode_id, AckStatus.COMMITTED, "routes-test", time.time_ns()))
    publisher.flush(10)

    def confirmed(ack_topic: str, spool: str) -> list[str]:
        config = UploaderConfig(broker, tmp_path / spool, ack_topic=ack_topic)
        with Uploader(config) as up:
            for episode in (fleet_a, shared):  # both spooled: only its topic's acks confirm
                up.submit(episode)
            deadline = time.monotonic() + 60
            while len(up.spool) == 2 and time.monotonic() < deadline:
                up.poll_acks(1.0)
            up.poll_acks(2.0)  # anything else on its topic would arrive by now
            return sorted(set(up._acks.committed))

    assert confirmed(fleet_ack_topic("fleet-a"), "spool-a") == [fleet_a.episode_id]
    assert shared.episode_id in confirmed(ACK_TOPIC, "spool-shared")
    assert fleet_a.episode_id not in confirmed(ACK_TOPIC, "spool-shared2")


def test_the_settings_reach_the_job_config_and_survive_its_json(tmp_path: Path) -> None:
    env = {"PILAKE_HOME": str(tmp_path), "PILAKE_ACK_ROUTES": "sim0-=fleet-a", "PILAKE_FLEET": "fleet-a"}
    settings = Settings.from_env(env)
    assert settings.ack_topic == "episodes.ack.v1.fleet-a"
    assert Settings(home=tmp_path).ack_topic == ACK_TOPIC
    config = stream_config(settings)
    assert config.ack_routes == "sim0-=fleet-a"
    assert config_from_json(config_to_json(config)).ack_routes == "sim0-=fleet-a"
    with pytest.raises(ValueError, match=r"kafka\.fleet / stream\.ack_routes: fleet must be"):
        Settings.from_env({**env, "PILAKE_FLEET": "../acks"})
    with pytest.raises(ValueError, match="routed to two fleets"):
        Settings.from_env({**env, "PILAKE_ACK_ROUTES": "a-=f1,a-=f2"})


@integration
def test_the_stream_job_acks_each_fleet_on_its_own_topic(
    broker: str, stack_settings: Settings, tmp_path: Path
) -> None:
    # the real job (PyFlink mini-cluster): the routes travel into the sink worker and decide
    # where each ack goes; each fleet's uploader then confirms exactly its own episode
    import uuid

    from confluent_kafka.admin import AdminClient, NewTopic
    from pi_jobs.stream import run_stream_job

    from tests.fixtures.stream_jobs import small_stream_job
    from tests.jobs.test_stream_job import _episode

    run = uuid.uuid4().hex[:8]
    raw_topic, shared_topic = f"ar-raw-{run}", f"ar-ack-{run}"
    admin = AdminClient({"bootstrap.servers": broker})
    for future in admin.create_topics(
        [NewTopic(raw_topic, num_partitions=2, replication_factor=1), NewTopic(shared_topic, 1, 1)]
    ).values():
        future.result(timeout=10)
    routed, unrouted = _episode(0), _episode(1)
    fleet = f"ar{run}"
    ack_routes = f"{routed.episode_id}={fleet}"

    def uploader(ack_topic: str, spool: str) -> Uploader:
        return Uploader(UploaderConfig(broker, tmp_path / spool, raw_topic=raw_topic, ack_topic=ack_topic))

    with uploader(fleet_ack_topic(fleet), "spool-fleet") as up_fleet:
        up_fleet.submit(routed)
        up_fleet.send_pending()
    with uploader(shared_topic, "spool-shared") as up_shared:
        up_shared.submit(unrouted)
        up_shared.send_pending()
    config = small_stream_job(
        broker=broker, root=tmp_path, jar_dir=stack_settings.jar_dir, raw_topic=raw_topic,
        ack_topic=shared_topic, group_id=f"ar-group-{run}", ack_routes=ack_routes,
    )  # fmt: skip
    report = run_stream_job(config, until_idle=True, idle_timeout_s=5.0, max_runtime_s=300)
    assert report.episodes_committed == 2

    def confirmed(ack_topic: str, spool: str) -> list[str]:
        with uploader(ack_topic, spool) as up:  # the spool of the upload above
            deadline = time.monotonic() + 60
            while len(up.spool) and time.monotonic() < deadline:
                up.poll_acks(1.0)
            return sorted(up._acks.committed)

    assert confirmed(fleet_ack_topic(fleet), "spool-fleet") == [routed.episode_id]
    assert confirmed(shared_topic, "spool-shared") == [unrouted.episode_id]


@integration
def test_pilake_up_creates_each_routed_fleets_ack_topic(broker: str) -> None:
    import uuid

    from confluent_kafka.admin import AdminClient
    from pi_jobs.local.stack import ensure_topics

    fleet = f"up{uuid.uuid4().hex[:8]}"
    ensure_topics(broker, {}, f"{fleet}-=" + fleet)
    topics = AdminClient({"bootstrap.servers": broker}).list_topics(timeout=10).topics
    assert len(topics[fleet_ack_topic(fleet)].partitions) == 1  # not the broker's auto-created 4
    assert ACK_TOPIC in topics
