"""The sink's group commit groups a burst: it commits when the input is drained, not between two
queued episodes.

A worker busy featurizing (~0.5 s an episode on 2 cores) used to commit every episode of a burst
alone: the group's 200 ms delay had passed by the time the next episode's first message was
handled, so that message committed the group of one (benchmarks/ingest/PROFILE.md: 13 commits for
13 episodes; a commit and its catalog record cost ~40 CPU ms per episode alone, ~15 in fours).
Now the delay is the input's quiet time: messages a few ms apart keep the group open until it is
full, the input is quiet for the delay, or its oldest waited `group_commit_max_wait_ms`.

Played in an exact order through the real sink function, LakeWriter on local disk and broker for
its acks; the Flink runtime around them is `FlinkRuntimeStandIn` (tests/jobs/test_stream_resend),
its clock moved by hand: a featurize "takes" 500 ms of it, queued messages come 1 ms apart.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from pi_format.wire import encode_episode

from tests.jobs.test_stream_resend import FlinkRuntimeStandIn, _episode

integration = pytest.mark.integration

FEATURIZE_MS = 500  # what one episode's featurize takes on a busy 2-core worker


class _Burst:
    """One sink subtask fed by hand: queued messages 1 ms apart, due timers fired in order."""

    def __init__(self, sink: Any, runtime: FlinkRuntimeStandIn) -> None:
        self.sink, self.runtime, self.offset = sink, runtime, 0

    def send_episode(self, *, published_ago_ms: int | None = None) -> str:
        """Its messages 1 ms apart, each with a Kafka timestamp `published_ago_ms` before it is
        read (None: no timestamp, as a queued burst's are long past)."""
        episode = _episode()
        chunks = encode_episode(episode, payload_bytes=4096)
        assert len(chunks) >= 2
        for value in chunks:
            self.runtime.now_ms += 1
            self.runtime.key = episode.episode_id
            published = None if published_ago_ms is None else self.runtime.now_ms - published_ago_ms
            record = (episode.episode_id.encode(), value, 0, self.offset, published)
            self.sink.process_element(record, self.runtime)
            self.offset += 1
        self.runtime.now_ms += FEATURIZE_MS  # the last chunk completed it: featurize ran
        self.sink.last_input_ms = self.runtime.now_ms  # ... and that message was done with then
        return str(episode.episode_id)

    def fire_due_timers(self) -> None:
        """Every timer due by now, earliest first (as Flink fires them)."""
        while due := sorted((at, key) for key, at in self.runtime.timers if at <= self.runtime.now_ms):
            at, key = due[0]
            self.runtime.timers.discard((key, at))
            self.runtime.key = key
            self.sink.on_timer(at, self.runtime)


def _sink(
    broker: str, tmp_path: Path, *, delay_ms: int = 200, max_wait_ms: int = 2000, max_episodes: int = 32
) -> tuple[Any, FlinkRuntimeStandIn]:
    from confluent_kafka.admin import AdminClient, NewTopic
    from pi_jobs.stream._sink import EpisodeSinkFunction
    from pi_jobs.stream._sink_settings import SinkSettings
    from pi_jobs.stream.featurize import FeaturizeConfig

    ack_topic = f"group-acks-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker})
    for future in admin.create_topics([NewTopic(ack_topic, 1, 1)]).values():
        future.result(timeout=10)
    settings = SinkSettings(
        bootstrap_servers=broker,
        lake_root=str(tmp_path / "lake"),
        catalog_path=str(tmp_path / "catalog"),
        raw_topic="group-raw",
        ack_topic=ack_topic,
        progress_path=str(tmp_path / "progress.json"),
        featurize=FeaturizeConfig(video_width=32, video_height=32, chunk_frames=4),
        writer_prefix="group",
        group_commit_delay_ms=delay_ms,
        group_commit_max_wait_ms=max_wait_ms,
        group_commit_max_episodes=max_episodes,
    )
    runtime = FlinkRuntimeStandIn()
    sink = EpisodeSinkFunction(settings)
    sink.open(runtime)
    return sink, runtime


def _episodes_commits(tmp_path: Path) -> int:
    from deltalake import DeltaTable

    return int(DeltaTable(str(tmp_path / "lake" / "episodes")).version())


@integration
def test_a_burst_commits_as_one_group_once_the_input_is_drained(broker: str, tmp_path: Path) -> None:
    sink, runtime = _sink(broker, tmp_path, delay_ms=200, max_wait_ms=5000)
    burst = _Burst(sink, runtime)
    try:
        before = _episodes_commits(tmp_path)
        ids = [burst.send_episode()]
        for _ in range(3):  # each queued behind the last: its group timer is past due meanwhile
            ids.append(burst.send_episode())
            burst.fire_due_timers()
            assert sink.progress["committed"] == 0, "a group committed between two queued episodes"
        assert [w.rows.episode_id for w in sink.waiting] == ids
        runtime.now_ms += 200  # the input is quiet: the group's timer commits it
        burst.fire_due_timers()
        assert sink.progress["committed"] == 4 and not sink.waiting
        assert _episodes_commits(tmp_path) == before + 1, "one episodes commit for the group of four"
        assert runtime.timers == set() and all(not v for v in runtime.state.values()), (
            "every key's timer fired after the commit and cleared its held positions"
        )
    finally:
        sink.close()


@integration
def test_under_steady_load_no_episode_waits_past_the_longest_wait(broker: str, tmp_path: Path) -> None:
    sink, runtime = _sink(broker, tmp_path, delay_ms=200, max_wait_ms=1200)
    burst = _Burst(sink, runtime)
    try:
        commits_at_start = _episodes_commits(tmp_path)
        committed = []
        for _ in range(7):  # never quiet: an episode every ~FEATURIZE_MS
            burst.send_episode()
            burst.fire_due_timers()
            committed.append(sink.progress["committed"])
        # groups of three: the third is featurized when the oldest has waited ~1 s, and the
        # oldest's timer (due at 1.2 s) fires after it; never a group of one
        assert committed == [0, 0, 3, 3, 3, 6, 6], committed
        assert _episodes_commits(tmp_path) == 2 + commits_at_start
    finally:
        sink.close()


@integration
def test_a_group_of_max_episodes_commits_at_once(broker: str, tmp_path: Path) -> None:
    sink, runtime = _sink(broker, tmp_path, max_episodes=2, max_wait_ms=60_000)
    burst = _Burst(sink, runtime)
    try:
        burst.send_episode()
        burst.send_episode()
        assert sink.progress["committed"] == 2 and not sink.waiting
    finally:
        sink.close()


@integration
def test_an_episode_read_as_soon_as_it_was_sent_commits_without_waiting(broker: str, tmp_path: Path) -> None:
    """Freshness: an episode whose messages were read within the delay of their Kafka timestamp
    had nothing queued behind it, so it commits right after its featurize, as before."""
    sink, runtime = _sink(broker, tmp_path, delay_ms=200, max_wait_ms=5000)
    burst = _Burst(sink, runtime)
    try:
        # its featurize ran in its last message's call: the commit follows in the same call,
        # with no timer and no quiet wait (the clock's jump stands for featurize afterwards)
        burst.send_episode(published_ago_ms=5)
        assert sink.progress["committed"] == 1 and not sink.waiting
        burst.send_episode(published_ago_ms=5_000)  # read 5 s after it was sent: a backlog
        assert sink.progress["committed"] == 1 and len(sink.waiting) == 1
        runtime.now_ms += 200
        burst.fire_due_timers()
        assert sink.progress["committed"] == 2
    finally:
        sink.close()


@integration
def test_a_long_delay_still_holds_a_backlog_read_a_second_after_it_was_sent(
    broker: str, tmp_path: Path
) -> None:
    """Caught up means read within 200 ms of the send, not within the delay: with a 20 s delay
    (the fault tests hold a group across checkpoints with one) a backlog still groups."""
    sink, runtime = _sink(broker, tmp_path, delay_ms=20_000, max_wait_ms=2000)
    burst = _Burst(sink, runtime)
    try:
        burst.send_episode(published_ago_ms=1_000)
        burst.send_episode(published_ago_ms=1_000)
        burst.fire_due_timers()
        assert sink.progress["committed"] == 0 and len(sink.waiting) == 2
        runtime.now_ms += 20_000  # quiet for the delay
        burst.fire_due_timers()
        assert sink.progress["committed"] == 2
    finally:
        sink.close()
