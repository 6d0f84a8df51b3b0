"""The PyFlink stream job on a real Tansu broker and a real local mini-cluster.

Tiny hand-built episodes are produced as wire chunks, plus one garbage message, one valid
chunk without a key and a full re-send of one episode; one `run_stream_job(until_idle=True)`
per module processes them all. A few pure helpers of the driver are unit-tested at the end.
"""

from __future__ import annotations

import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable
from pi_format import Ack, AckStatus, CameraSpec, CameraVideo, Episode, EpisodeMeta, LakeLayout
from pi_format.video import encode_mp4
from pi_format.wire import encode_episode

from tests.fixtures.stream_jobs import small_stream_job

integration = pytest.mark.integration


def _episode(index: int) -> Episode:
    rng = np.random.default_rng(index)
    steps, frames = 15 + index, 6
    rgb = [np.full((48, 64, 3), (30 * i + 20 * index) % 255, np.uint8) for i in range(frames)]
    spec = CameraSpec(name="cam_high", codec="h264", container="mp4", width=64, height=48, fps=10.0)
    cam = CameraVideo(
        spec,
        np.arange(frames, dtype=np.int64) * 100_000_000,
        encode_mp4(rgb, fps=10.0, width=64, height=48),
    )
    meta = EpisodeMeta(f"it-{uuid.uuid4().hex[:8]}-{index}", "r1", "aloha", "stack", 0, 15.0, index % 2 == 0)
    return Episode(
        meta,
        np.arange(steps, dtype=np.int64) * int(1e9 / 15.0),
        rng.standard_normal((steps, 4)).astype(np.float32),
        rng.standard_normal((steps, 2)).astype(np.float32),
        (cam,),
    )


@dataclass
class Landed:
    config: Any  # pi_jobs.stream.driver.StreamJobConfig
    episodes: list[Episode]
    layout: LakeLayout
    report: Any  # pi_jobs.stream.driver.StreamReport
    acks: list[Ack]
    garbage_offset: tuple[int, int]
    stray: Episode


def _read_acks(broker: str, topic: str, expected: int, timeout_s: float = 30.0) -> list[Ack]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": broker, "group.id": f"acks-{uuid.uuid4()}", "fetch.wait.max.ms": 100}
    )
    acks: list[Ack] = []
    deadline = time.monotonic() + timeout_s
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        while len(acks) < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            value = msg.value() if msg is not None and msg.error() is None else None
            if value is not None:
                acks.append(Ack.decode(value))
    finally:
        consumer.close()
    return acks


# both places PyFlink runs the sink's Python: a Beam worker process (the default) and threads
# inside the TaskManager JVM (PEMJA; issue 35 measures what each costs). Thread mode is
# experimental (a benchmark burst once wedged its JVM at a checkpoint): its run is bounded
# well below the suite's 900 s per test, so a wedge fails here instead of stalling CI. Because a
# wedge is not understood yet, its scenario runs on request (PILAKE_TEST_THREAD_MODE=1), not in CI:
# a failure there would say "thread mode is experimental", which the docs already say.
_THREAD_MODE = pytest.param(
    "thread",
    marks=[
        pytest.mark.timeout(420),
        pytest.mark.skipif(
            os.environ.get("PILAKE_TEST_THREAD_MODE") != "1",
            reason="PyFlink thread mode is experimental (a JVM wedged once at a checkpoint under a "
            "benchmark burst); set PILAKE_TEST_THREAD_MODE=1 to run its scenario",
        ),
    ],
)


@pytest.fixture(scope="module", params=["process", _THREAD_MODE])
def landed(
    broker: str, stack_settings: Any, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Landed:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    from pi_jobs.stream import run_stream_job

    run = uuid.uuid4().hex[:8]
    raw_topic, ack_topic = f"it-raw-{run}", f"it-ack-{run}"
    admin = AdminClient({"bootstrap.servers": broker})
    for future in admin.create_topics(
        [NewTopic(raw_topic, num_partitions=2, replication_factor=1), NewTopic(ack_topic, 1, 1)]
    ).values():
        future.result(timeout=10)

    episodes = [_episode(i) for i in range(3)]
    producer = Producer({"bootstrap.servers": broker, "enable.idempotence": True, "linger.ms": 5})
    garbage: list[tuple[int, int]] = []

    def on_garbage(err: Any, msg: Any) -> None:
        garbage.append((msg.partition(), msg.offset()))

    stray = _episode(9)  # one valid chunk of it arrives without a key

    # small payloads: several chunks per stream, and several records per broker batch
    for ep in episodes:
        for value in encode_episode(ep, payload_bytes=4096):
            producer.produce(raw_topic, key=ep.episode_id.encode(), value=value)
    producer.produce(
        raw_topic, key=b"junk-key", value=b"this is not a pi-lake chunk at all", on_delivery=on_garbage
    )
    producer.produce(raw_topic, value=encode_episode(stray, payload_bytes=4096)[0])
    for value in encode_episode(episodes[0], payload_bytes=4096):  # a robot re-sends episode 0
        producer.produce(raw_topic, key=episodes[0].episode_id.encode(), value=value)
    assert producer.flush(30) == 0

    work = tmp_path_factory.mktemp("stream-job")
    config = small_stream_job(
        broker=broker,
        root=work,
        jar_dir=stack_settings.jar_dir,
        raw_topic=raw_topic,
        ack_topic=ack_topic,
        group_id=f"it-group-{run}",
        parallelism=2,  # two sink subtasks, two lake writers, two progress files
        python_execution_mode=request.param,
    )
    report = run_stream_job(config, until_idle=True, idle_timeout_s=2.0, max_runtime_s=240)
    acks = _read_acks(broker, ack_topic, expected=4)
    return Landed(config, episodes, LakeLayout(config.lake_root), report, acks, garbage[0], stray)


@integration
def test_two_sink_subtasks_each_a_writer(landed: Landed) -> None:
    from deltalake import DeltaTable
    from pi_format.lake import writer_app_id

    files = sorted(landed.config.work_dir.glob("progress-*.json"))
    assert [f.name for f in files] == ["progress-0.json", "progress-1.json"]
    episodes = DeltaTable(landed.layout.episodes)
    writers = [writer_app_id(f"{landed.config.group_id}-{i}") for i in (0, 1)]
    groups = [episodes.transaction_version(w) or 0 for w in writers]
    # every markers commit is a group commit of one writer; episodes are keyed to one subtask
    assert sum(groups) == episodes.version() and sum(groups) >= 1


@integration
def test_every_message_processed(landed: Landed) -> None:
    chunks = sum(len(encode_episode(ep, payload_bytes=4096)) for ep in landed.episodes)
    resend = len(encode_episode(landed.episodes[0], payload_bytes=4096))
    r = landed.report
    assert r.messages == chunks + 2 + resend
    assert (r.episodes_committed, r.episodes_duplicate, r.quarantined, r.incomplete) == (3, 1, 2, 0)
    assert DeltaTable(landed.layout.raw).to_pyarrow_table().num_rows == r.messages


@integration
def test_each_episode_visible_once_and_bit_exact(landed: Landed) -> None:
    episodes = DeltaTable(landed.layout.episodes).to_pyarrow_table()
    assert sorted(episodes.column("episode_id").to_pylist()) == sorted(e.episode_id for e in landed.episodes)
    steps = DeltaTable(landed.layout.steps).to_pyarrow_table()
    video = DeltaTable(landed.layout.video).to_pyarrow_table()
    for ep in landed.episodes:
        row = episodes.filter(pc.equal(episodes.column("episode_id"), ep.episode_id)).to_pylist()[0]
        mine = steps.filter(
            pc.and_(
                pc.equal(steps.column("episode_id"), ep.episode_id),
                pc.equal(steps.column("attempt_id"), row["attempt_id"]),
            )
        ).sort_by("step_index")
        assert mine.num_rows == ep.step_count
        for name, want in (("proprio", ep.proprio), ("action", ep.action)):
            got = np.array(mine.column(name).to_pylist(), dtype=np.float32)
            assert got.view(np.uint32).tolist() == want.view(np.uint32).tolist()
        frames = pc.sum(
            video.filter(pc.equal(video.column("attempt_id"), row["attempt_id"])).column("frame_count")
        ).as_py()
        assert frames == ep.cameras[0].frame_count


@integration
def test_garbage_and_keyless_chunk_quarantined(landed: Landed) -> None:
    rows = DeltaTable(landed.layout.quarantine).to_pyarrow_table().to_pylist()
    by_reason = {r["reason"]: r for r in rows}
    assert sorted(by_reason) == ["bad_magic", "key_mismatch"]
    assert by_reason["key_mismatch"]["episode_id"] == landed.stray.episode_id  # read from the chunk
    q = [by_reason["bad_magic"]]
    partition, offset = landed.garbage_offset
    assert q[0]["reason"] == "bad_magic"
    assert (q[0]["kafka_partition"], q[0]["kafka_offsets"]) == (partition, [offset])
    raw = DeltaTable(landed.layout.raw).to_pyarrow_table()
    kept = raw.filter(pc.equal(raw.column("attempt_id"), q[0]["attempt_id"])).to_pylist()
    assert [r["message"] for r in kept] == [b"this is not a pi-lake chunk at all"]


@integration
def test_acks_published(landed: Landed) -> None:
    by_episode: dict[str, list[Ack]] = {}
    for ack in landed.acks:
        by_episode.setdefault(ack.episode_id, []).append(ack)
    assert sorted(by_episode) == sorted(e.episode_id for e in landed.episodes)
    assert all(a.status is AckStatus.COMMITTED for a in landed.acks)
    # the re-sent episode is acked twice, both times naming the one committed attempt
    resent = by_episode[landed.episodes[0].episode_id]
    assert len(resent) == 2 and resent[0].attempt_id == resent[1].attempt_id


@integration
def test_catalog_indexes_committed_episodes(landed: Landed) -> None:
    from pi_catalog import Catalog

    ids = Catalog(landed.config.catalog_path).episode_ids(
        "SELECT episode_id FROM episodes ORDER BY episode_id"
    )
    assert ids == sorted(e.episode_id for e in landed.episodes)


@integration
def test_job_failure_surfaces_with_log_tail(landed: Landed, tmp_path: Path) -> None:
    from dataclasses import replace

    from pi_jobs import StreamJobError
    from pi_jobs.stream import run_stream_job

    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the lake should be")
    config = replace(
        landed.config,
        lake_root=str(blocker / "lake"),  # the sink cannot create its tables: every attempt fails
        work_dir=tmp_path / "flink",
        group_id=f"it-fail-{uuid.uuid4().hex[:8]}",
    )
    with pytest.raises(StreamJobError, match="stream job failed") as info:
        run_stream_job(config, until_idle=True, idle_timeout_s=2.0, max_runtime_s=240)
    message = str(info.value)
    assert "logs in /" in message
    assert "not-a-dir" in message  # the worker's own error is quoted, not just "job failed"


@integration
def test_true_end_offsets_count_every_record(landed: Landed) -> None:
    from pi_jobs.stream.offsets import true_end_offsets

    # the topic is fresh (offsets start at 0): the true ends add up to the records produced,
    # although the broker's high watermarks undercount batches of several records
    assert sum(true_end_offsets(landed.config).values()) == landed.report.messages


@integration
def test_second_run_resumes_from_committed_offsets(landed: Landed) -> None:
    from pi_jobs.stream import run_stream_job

    report = run_stream_job(landed.config, until_idle=True, idle_timeout_s=1.0, max_runtime_s=240)
    assert (report.messages, report.episodes_committed) == (0, 0)
    assert DeltaTable(landed.layout.episodes).to_pyarrow_table().num_rows == len(landed.episodes)


# -- pure helpers of the driver (no broker, no Flink) -------------------------------------------
def test_config_validation_and_repr_hides_client_options(tmp_path: Path) -> None:
    from pi_jobs.stream import StreamJobConfig

    def make(**kw: Any) -> StreamJobConfig:
        base: dict[str, Any] = {
            "bootstrap_servers": "h:1",
            "lake_root": "lake",
            "catalog_path": "cat",
            "work_dir": tmp_path,
            "jar_dir": tmp_path,
        }
        return StreamJobConfig(**{**base, **kw})

    assert "s3cret" not in repr(make(client_options={"sasl.password": "s3cret"}))
    with pytest.raises(ValueError, match="checkpoint_interval_ms must be >= 100"):
        make(checkpoint_interval_ms=10)
    with pytest.raises(ValueError, match="bootstrap_servers"):
        make(bootstrap_servers="")
    with pytest.raises(ValueError, match="group_id must be non-empty"):
        make(group_id="")
    with pytest.raises(ValueError, match="python_execution_mode must be 'process' or 'thread'"):
        make(python_execution_mode="loopback")


def test_caught_up_uses_processed_and_committed_offsets() -> None:
    from pi_jobs.stream.driver import _caught_up

    ends = {0: 10, 1: 5, 2: 0}
    assert _caught_up({"offsets": {"0": 9, "1": 4}}, ends, {})
    assert not _caught_up({"offsets": {"0": 8, "1": 4}}, ends, {})
    # partition 1 was fully consumed by an earlier run: its committed offset is its end
    assert _caught_up({"offsets": {"0": 9}}, ends, {1: 5})
    assert not _caught_up({"offsets": {"0": 9}}, ends, {1: 4})


def test_python_error_keeps_the_innermost_frames_and_reason() -> None:
    from pi_jobs.stream._logs import python_error

    frames = "".join(f'  File "f{i}.py", line {i}, in g\n    x()\n' for i in range(40))
    head = "java.lang.RuntimeException: boom\nTraceback (most recent call last):\n"
    text = f"{head}{frames}ValueError: bad\n\tat org.X"
    cut = python_error(text, frames=4)
    assert cut is not None
    assert cut.splitlines()[-1] == "ValueError: bad"
    assert "f39.py" in cut and "f0.py" not in cut
    assert python_error("no traceback here") is None
