"""More cases of scripts/record_alert_metrics.py (see its docstring): the stream job killed, a robot
sending bad messages, a backlog growing while the lake store is down, a scrub that stopped
running. Each returns {"scrapes": {kind: [scrape, ...]}, ...} as the other cases do; the ones
with Unix times in their series keep each scrape's wall time ("wall") for the render to rebase
them onto promtool's clock (which starts at 0)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

JOB_KILLED_AT = 8  # job_down: the scrape after which the stream job's processes are SIGKILLed
BAD_EVERY = 4  # quarantine_rising: a batch of bad messages (4 bad episodes) every 4 scrapes
FLOOD_PAYLOAD_BYTES = 256  # store_down_backlog: a robot's small chunks (~47 per 12.8 KB episode)
FLOOD_EPISODES_PER_SCRAPE = 2  # ... ~94 messages a second once the store is down
VERIFY_SCRAPES = 96  # verify_stopped: one scrape = one promtool hour
VERIFY_EVERY = 24  # ... the scrub runs "daily": every 24 scrapes
VERIFY_RUNS = 3  # ... at scrapes 0, 24 and 48, then never again (the CronJob stopped)
VERIFY_STEP_S = 3600  # promtool seconds per scrape of verify_stopped


def record_job_down(tmp: Path, uploader_port: int) -> dict[str, Any]:
    """The stream job works (an episode committed), then after scrape JOB_KILLED_AT every process
    of it (driver, JVM, Python worker) is SIGKILLed: its endpoint stops answering."""
    from scripts.record_alert_metrics import _stream_case

    def kill(i: int, stream: Any, stack: Any) -> None:
        if i == JOB_KILLED_AT:
            stream.kill_group()

    scrapes = _stream_case(
        tmp,
        "job_down",
        lake_env=None,
        uploader_port=uploader_port,
        kinds=("stream",),
        on_step=kill,
        vanish=("stream",),
    )
    return {"scrapes": scrapes, "fault": f"stream job SIGKILLed after scrape {JOB_KILLED_AT}"}


def record_quarantine_rising(tmp: Path, uploader_port: int) -> dict[str, Any]:
    """The healthy stream job and uploader, and a robot that sends bad messages (a flipped bit, a
    truncated chunk, an oversize message, protocol version 2: pi_jobs.local.faults'
    bad_messages) every BAD_EVERY scrapes through its own Kafka producer: each is quarantined
    with its reason, the good episodes beside them are committed."""
    from confluent_kafka import Producer
    from pi_format import RAW_TOPIC
    from pi_jobs.local.faults._messages import bad_messages

    from scripts.record_alert_metrics import SCRAPES, _stream_case

    batches = [bad_messages(9800 + 10 * n)[0] for n in range(SCRAPES // BAD_EVERY + 1)]
    producer: list[Any] = []

    def send_bad(i: int, stream: Any, stack: Any) -> None:
        if i % BAD_EVERY != 1:
            return
        if not producer:
            producer.append(Producer({"bootstrap.servers": stack.bootstrap, "message.max.bytes": 4_000_000}))
        for key, value in batches[i // BAD_EVERY]:
            producer[0].produce(RAW_TOPIC, key=key.encode(), value=value)
        if producer[0].flush(10):
            raise RuntimeError("bad messages not delivered to the broker")

    scrapes = _stream_case(
        tmp, "quarantine_rising", lake_env=None, uploader_port=uploader_port, on_step=send_bad
    )
    return {"scrapes": scrapes, "bad": f"a batch of bad messages (4 episodes) every {BAD_EVERY} scrapes"}


def record_store_down_backlog(tmp: Path, uploader_port: int) -> dict[str, Any]:
    """store_down's stack (the lake on SeaweedFS, stopped under the running job after scrape
    STORE_STOP_AT) while robots keep sending: FLOOD_EPISODES_PER_SCRAPE real episodes a second in
    small chunks (FLOOD_PAYLOAD_BYTES) through a Kafka producer once the store is down. The
    blocked sink reads none of them: the consumer lag grows past 1,000 messages."""
    from confluent_kafka import Producer
    from pi_format import RAW_TOPIC
    from pi_format.wire import encode_episode
    from pi_jobs.local.faults._messages import simulated

    from scripts.record_alert_metrics import SCRAPES, STORE_STOP_AT, _stream_case
    from tests.conftest import _free_port
    from tests.fixtures.seaweedfs import seaweedfs

    flood = simulated(9900, robots=2, episodes=SCRAPES * FLOOD_EPISODES_PER_SCRAPE // 2 + 1)
    producer: list[Any] = []

    def send_flood(i: int, stream: Any, stack: Any) -> None:
        if i <= STORE_STOP_AT:
            return
        if not producer:
            producer.append(Producer({"bootstrap.servers": stack.bootstrap, "linger.ms": 0}))
        for _ in range(FLOOD_EPISODES_PER_SCRAPE):
            if flood:
                episode = flood.pop()
                for value in encode_episode(episode, payload_bytes=FLOOD_PAYLOAD_BYTES):
                    producer[0].produce(RAW_TOPIC, key=episode.episode_id.encode(), value=value)
        producer[0].flush(10)

    with seaweedfs(tmp / "seaweedfs-backlog", s3_port=_free_port()) as s3:
        lake_env = {"PILAKE_LAKE": s3.uri("lake"), **s3.storage_options}
        scrapes = _stream_case(
            tmp,
            "store_down_backlog",
            lake_env=lake_env,
            uploader_port=uploader_port,
            store=s3,
            kinds=("stream",),
            on_step=send_flood,
        )
    return {
        "scrapes": scrapes,
        "store": f"SeaweedFS, stopped at scrape {STORE_STOP_AT}",
        "flood": (
            f"{FLOOD_EPISODES_PER_SCRAPE} episodes a scrape in {FLOOD_PAYLOAD_BYTES}-byte chunks "
            "after the stop"
        ),
    }


def record_verify_stopped(tmp: Path, uploader_port: int) -> dict[str, Any]:
    """`pilake verify --metrics-file` (the real CLI, a subprocess) run as a daily CronJob would
    be: one scrape stands for an hour (VERIFY_STEP_S), the scrub runs every VERIFY_EVERY scrapes,
    VERIFY_RUNS times, then never again (the CronJob suspended, or its pods unschedulable). The
    file keeps the last run's figures, as a Pushgateway keeps the last push: only the age of
    pilake_verify_last_run_timestamp_seconds tells that no scrub ran since."""
    from scripts.alert_metrics_cases import _parse
    from tests.fixtures.raw_lake import write_raw_lake

    lake = tmp / "verify-stopped-lake"
    write_raw_lake(lake, robots=1, episodes_per_robot=2)
    prom = tmp / "textfile-stopped" / "pilake-verify.prom"
    env = {**os.environ, "PILAKE_HOME": str(tmp / "verify-stopped-home"), "PILAKE_LAKE": str(lake)}
    cmd = [
        str(Path(sys.executable).with_name("pilake")),
        "verify",
        "--no-progress",
        "--metrics-file",
        str(prom),
    ]
    codes: list[int] = []

    def run() -> None:
        codes.append(subprocess.run(cmd, env=env, capture_output=True, timeout=600).returncode)

    got: list[dict[str, float]] = []
    wall: list[float] = []
    runner: threading.Thread | None = None
    for i in range(VERIFY_SCRAPES):
        tick = time.monotonic()
        if i % VERIFY_EVERY == 0 and i // VERIFY_EVERY < VERIFY_RUNS:
            if runner is not None:
                runner.join()
            runner = threading.Thread(target=run)
            runner.start()
            if i == 0:  # the recording starts with the first run's figures
                runner.join()
        wall.append(time.time())
        got.append(_parse(prom.read_text()))
        time.sleep(max(0.0, 1.0 - (time.monotonic() - tick)))
    if runner is not None:
        runner.join()
    if codes != [0] * VERIFY_RUNS:
        raise RuntimeError(f"pilake verify exited {codes}, expected {[0] * VERIFY_RUNS}")
    return {
        "scrapes": {"verify": got},
        "wall": wall,
        "scrape_s": 1.0,
        "step_s": VERIFY_STEP_S,
        "exit_codes": codes,
        "runs": f"every {VERIFY_EVERY} scrapes, {VERIFY_RUNS} times, then none",
    }
