"""Compaction racing the real stream job: while the PyFlink job keeps committing group after
group (episodes arrive one by one on the real broker), `compact` merges the groups it finds,
again and again. No commit is lost, the job does not fail, every episode is visible once and
every sample reads."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import numpy as np
import pytest
from deltalake import DeltaTable
from pi_format import LakeLayout
from pi_format.lake import read_committed
from pi_format.wire import encode_episode
from pi_loader import Dataset, SampleSpec

from tests.fixtures.stream_jobs import small_stream_job
from tests.jobs.test_stream_job import _episode

integration = pytest.mark.integration

EARLY, LATE = 4, 16


@integration
def test_compaction_while_the_stream_job_commits(
    broker: str, stack_settings: Any, tmp_path_factory: pytest.TempPathFactory
) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    from pi_jobs.maintenance import CompactConfig, compact
    from pi_jobs.ops.audit import audit
    from pi_jobs.stream import run_stream_job

    run = uuid.uuid4().hex[:8]
    raw_topic, ack_topic = f"cr-raw-{run}", f"cr-ack-{run}"
    admin = AdminClient({"bootstrap.servers": broker})
    for future in admin.create_topics(
        [NewTopic(raw_topic, num_partitions=2, replication_factor=1), NewTopic(ack_topic, 1, 1)]
    ).values():
        future.result(timeout=10)
    episodes = [_episode(i) for i in range(EARLY + LATE)]
    producer = Producer({"bootstrap.servers": broker, "enable.idempotence": True, "linger.ms": 5})

    def publish(chosen: list[Any], gap_s: float) -> None:
        for ep in chosen:
            for value in encode_episode(ep, payload_bytes=4096):
                producer.produce(raw_topic, key=ep.episode_id.encode(), value=value)
            producer.flush(30)
            time.sleep(gap_s)

    publish(episodes[:EARLY], 0.0)
    work = tmp_path_factory.mktemp("compaction-race")
    config = small_stream_job(
        broker=broker,
        root=work,
        jar_dir=stack_settings.jar_dir,
        raw_topic=raw_topic,
        ack_topic=ack_topic,
        group_id=f"cr-group-{run}",
        group_commit_max_episodes=1,  # a file group per episode: many small groups to merge
        group_commit_delay_ms=0,
    )
    layout = LakeLayout(config.lake_root)
    outcome: dict[str, Any] = {}

    def run_job() -> None:
        try:
            outcome["report"] = run_stream_job(config, until_idle=True, idle_timeout_s=4.0, max_runtime_s=300)
        except BaseException as err:  # surfaced by the main thread
            outcome["error"] = err

    job = threading.Thread(target=run_job, daemon=True)
    job.start()
    deadline = time.monotonic() + 180
    while _committed(layout) < 2:
        assert job.is_alive(), outcome.get("error")
        assert time.monotonic() < deadline, "the stream job committed nothing in 180 s"
        time.sleep(0.5)
    late = threading.Thread(target=publish, args=(episodes[EARLY:], 0.4), daemon=True)
    late.start()
    config_small = CompactConfig(target_file_bytes=64 << 20, small_group_bytes=32 << 20)
    # the first pass finds the 2+ groups committed so far (one episode each), before the job
    # can have committed the late episodes (published 0.4 s apart from now on)
    merges = [compact(layout, config_small, progress=lambda _: None).groups_merged]
    while job.is_alive():
        time.sleep(0.3)
        merges.append(compact(layout, config_small, progress=lambda _: None).groups_merged)
    job.join()
    assert "error" not in outcome, outcome.get("error")
    assert outcome["report"].episodes_committed == EARLY + LATE
    assert merges[0] >= 2, merges
    # the episodes table's history interleaves rewrites and the job's group commits: a rewrite
    # landed between the job's commits, and the job went on committing after it
    ops = [e.get("pilake.operation", "stream") for e in reversed(DeltaTable(layout.episodes).history())]
    first_rewrite = ops.index("rewrite")
    assert "stream" in ops[first_rewrite:], ops

    compact(layout, config_small, progress=lambda _: None)
    visible = read_committed(layout, ["step_count"])
    assert sorted(visible.column("episode_id").to_pylist()) == sorted(e.episode_id for e in episodes)
    checked = audit(layout, catalog_path=config.catalog_path)
    assert checked.missing == 0 and checked.duplicated == 0 and checked.catalog_agrees, checked
    ds = Dataset(layout, spec=SampleSpec(cameras=("cam_high",), action_horizon=2))
    assert len(ds) == sum(len(e.timestamps_ns) for e in episodes)
    assert all(np.asarray(ds[i]["observation.images.cam_high"]).shape == (32, 32, 3) for i in range(len(ds)))


def _committed(layout: LakeLayout) -> int:
    try:
        return read_committed(layout, ["step_count"]).num_rows
    except Exception:  # the tables do not exist yet
        return 0
