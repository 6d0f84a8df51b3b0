"""A re-send that starts before the original's group commit lands counts as one duplicate.

The stream job's integration test (tests/jobs/test_stream_job.py) re-sends an episode; on a busy
machine it once counted that re-send as two duplicates (and acked it twice): the re-send's first
chunk came while the original waited in the group, the group committed, and the key's timer then
found the original's held positions and took them for an episode committed before a restore.
Which of those orders a real run takes depends on the machine's load, so this test plays that
one order on purpose: the real sink function, the real LakeWriter on local disk, the real broker
for its acks, and a stand-in only for the Flink runtime around them (`FlinkRuntimeStandIn`:
keyed list state and a timer service, driven by hand so the order is exact).
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pi_format import CameraSpec, CameraVideo, Episode, EpisodeMeta
from pi_format.video import encode_mp4
from pi_format.wire import encode_episode

integration = pytest.mark.integration


class FlinkRuntimeStandIn:
    """The runtime context, keyed context and timer service of one sink subtask, by hand."""

    def __init__(self) -> None:
        self.key = ""
        self.now_ms = 1_000_000
        self.state: dict[str, list[Any]] = defaultdict(list)
        self.timers: set[tuple[str, int]] = set()

    # RuntimeContext
    def get_index_of_this_subtask(self) -> int:
        return 0

    def get_list_state(self, descriptor: Any) -> Any:
        runtime = self

        class _KeyedList:
            def get(self) -> list[Any]:
                return list(runtime.state[runtime.key])

            def add(self, value: Any) -> None:
                runtime.state[runtime.key].append(value)

            def clear(self) -> None:
                runtime.state.pop(runtime.key, None)

        return _KeyedList()

    # KeyedProcessFunction.Context
    def get_current_key(self) -> str:
        return self.key

    def timer_service(self) -> FlinkRuntimeStandIn:
        return self

    def current_processing_time(self) -> int:
        return self.now_ms

    def register_processing_time_timer(self, at_ms: int) -> None:
        self.timers.add((self.key, int(at_ms)))

    def delete_processing_time_timer(self, at_ms: int) -> None:
        self.timers.discard((self.key, int(at_ms)))


def _episode() -> Episode:
    rng = np.random.default_rng(5)
    frames = [np.full((48, 64, 3), 40 * i, np.uint8) for i in range(4)]
    spec = CameraSpec(name="cam_high", codec="h264", container="mp4", width=64, height=48, fps=10.0)
    camera = CameraVideo(
        spec, np.arange(4, dtype=np.int64) * 100_000_000, encode_mp4(frames, fps=10.0, width=64, height=48)
    )
    meta = EpisodeMeta(f"resend-{uuid.uuid4().hex[:8]}", "r1", "aloha", "stack", 0, 15.0, True)
    return Episode(
        meta,
        np.arange(12, dtype=np.int64) * int(1e9 / 15.0),
        rng.standard_normal((12, 4)).astype(np.float32),
        rng.standard_normal((12, 2)).astype(np.float32),
        (camera,),
    )


@integration
def test_a_resend_begun_before_the_group_commit_is_one_duplicate(broker: str, tmp_path: Path) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    from pi_jobs.stream._sink import EpisodeSinkFunction
    from pi_jobs.stream._sink_settings import SinkSettings
    from pi_jobs.stream.featurize import FeaturizeConfig

    ack_topic = f"resend-acks-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker})
    for future in admin.create_topics([NewTopic(ack_topic, 1, 1)]).values():
        future.result(timeout=10)
    settings = SinkSettings(
        bootstrap_servers=broker,
        lake_root=str(tmp_path / "lake"),
        catalog_path=str(tmp_path / "catalog"),
        raw_topic="resend-raw",
        ack_topic=ack_topic,
        progress_path=str(tmp_path / "progress.json"),
        featurize=FeaturizeConfig(video_width=32, video_height=32, chunk_frames=4),
        writer_prefix="resend",
    )
    runtime = FlinkRuntimeStandIn()
    sink = EpisodeSinkFunction(settings)
    sink.open(runtime)
    episode = _episode()
    chunks = encode_episode(episode, payload_bytes=4096)
    assert len(chunks) >= 2, "the re-send must be under way (not complete) when the group commits"
    runtime.key = episode.episode_id
    offset = 0

    def send(value: bytes) -> None:
        nonlocal offset
        runtime.now_ms += 1
        sink.process_element((episode.episode_id.encode(), value, 0, offset, None), runtime)
        offset += 1

    try:
        for value in chunks:  # the original: complete, waiting in the group
            send(value)
        assert sink._in_group(episode.episode_id) and sink.progress["committed"] == 0
        send(chunks[0])  # the re-send begins while the original waits
        # the key's group timer: the group commits, then the re-send is found pending
        runtime.now_ms += settings.group_commit_delay_ms + 1
        sink.on_timer(runtime.now_ms, runtime)
        assert sink.progress["committed"] == 1
        assert sink.progress["duplicates"] == 0, "a re-send still under way is not a duplicate yet"
        # its positions stay held (a restore would read them again), the original's are gone
        assert sorted(runtime.state[episode.episode_id]) == [(0, len(chunks))]
        for value in chunks[1:]:  # the re-send completes: now it is one duplicate
            send(value)
        assert (sink.progress["committed"], sink.progress["duplicates"]) == (1, 1)
        assert runtime.state.get(episode.episode_id, []) == []
    finally:
        sink.close()
