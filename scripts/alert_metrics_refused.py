"""A case of scripts/record_alert_metrics.py (see its docstring) for PilakeStreamNotCommitting:
episodes keep coming in, none is committed, the stream worker serves its series.

The failure: a fleet of robots of a new type ("aloha2": new firmware, a new model) rolled out
before the robot registry (robots.toml) lists it. The stream job is healthy (its first episode,
an "aloha", is committed and acknowledged); from scrape REFUSED_FROM on only the new robots send,
an episode a scrape: each arrives whole (pilake_stream_episodes_in_total rises), fails the
contract check as unknown_robot_type and is quarantined; nothing is committed.

Why not a lake or catalog that refuses writes: the sink commits its group synchronously, so a
commit that fails either blocks it in its retries (a store down: the sink reads nothing more,
episodes_in stops too: PilakeStreamStalled, recorded as store_down) or fails the task at once
(a permission refused: Flink restarts the job, whose worker serves no series between restarts:
PilakeStreamRestarting, recorded as sink_crash_looping). Neither leaves episodes coming in.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

REFUSED_FROM = 4  # the scrape after which only the unregistered robots send
NEW_TYPE = "aloha2"  # a robot type robots.toml does not list


def record_all_refused(tmp: Path, uploader_port: int) -> dict[str, Any]:
    from confluent_kafka import Producer
    from pi_format import RAW_TOPIC
    from pi_format.wire import encode_episode
    from pi_ingest.simulator import SimulationConfig, simulate_fleet

    from scripts.record_alert_metrics import SCRAPES, _stream_case

    cfg = SimulationConfig(
        robots=1,
        episodes_per_robot=SCRAPES,
        duration_s=1.0,
        camera_width=160,
        camera_height=120,
        cameras=("cam_high",),
        robot_type=NEW_TYPE,
        seed=9970,
    )
    fleet = [s.episode for s in simulate_fleet(cfg)]
    producer: list[Any] = []

    def send_new_type(i: int, stream: Any, stack: Any) -> None:
        if i < REFUSED_FROM or not fleet:
            return
        if not producer:
            producer.append(Producer({"bootstrap.servers": stack.bootstrap, "linger.ms": 0}))
        episode = fleet.pop(0)
        for value in encode_episode(episode):
            producer[0].produce(RAW_TOPIC, key=episode.episode_id.encode(), value=value)
        if producer[0].flush(10):
            raise RuntimeError("episodes not delivered to the broker")

    scrapes = _stream_case(
        tmp,
        "all_refused",
        lake_env=None,
        uploader_port=uploader_port,
        kinds=("stream",),
        on_step=send_new_type,
        uploads=False,
    )
    return {
        "scrapes": scrapes,
        "fault": (
            f"from scrape {REFUSED_FROM} only robots of type {NEW_TYPE!r} (not in robots.toml) send, "
            "an episode a scrape: each quarantined as unknown_robot_type"
        ),
    }
