"""The long case of scripts/record_alert_metrics.py (see its docstring): the lake's object store
down for more than 5 minutes while robots keep sending, then back, so that the episodes committed
after it are more than 5 minutes late (PilakeFreshnessSlow).

The stream job runs as deployed locally (`pilake stream` on its mini-cluster, the lake on
SeaweedFS, default dependency_retry_s 120 s and 3 restarts in a row): the blocked group commit
retries for 120 s and fails the task, Flink restarts it, the restarted sink's `lake open` retries
(no worker serves metrics meanwhile: it starts them once the lake opened), fails again, and a
later start opens the lake once the store is back (the 380 s outage fits in the 3 restarts);
the replay from the last checkpoint commits the backlog, each episode as late as it waited in
Kafka. The recording stops once the freshness
condition (p95 over the last 10 scrapes, as the rule's 10m window) has held FIRE_HOLD scrapes in
a row: the rule's `for: 15m` (the burst of late commits leaves its window 10 scrapes after they
end, so the alert fires only while the backlog drains; a later scrape would find it resolved).
"""

from __future__ import annotations

import gc
import json
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

OUTAGE_AFTER = 10  # the scrape after which the object store is stopped
OUTAGE_S = 380.0  # how long it stays down: more than the 300 s threshold, with a margin
EPISODES_PER_S = 2.0  # the robots' rate, before, during and after the outage (7 messages each):
# a third of what the sink commits here (~6 a second), so the backlog drains for minutes
FIRE_HOLD = 19  # scrapes the freshness condition must hold in a row: the rule's `for` (15m) + 4
MAX_SCRAPES_AFTER = 180  # scrapes after the store is back before the case gives up
THRESHOLD_S = 300.0  # PilakeFreshnessSlow's
# the series this case keeps (the ones the stream rules read): ~35 series x ~450 scrapes
KEPT_NAMES = (
    "pilake_stream_subtask",
    "pilake_stream_episodes_in_total",
    "pilake_stream_episodes_committed_total",
    "pilake_stream_episodes_quarantined_total",
    "pilake_stream_dependency_retries_total",
    "pilake_stream_dependency_failures_total",
    "pilake_stream_consumer_lag_messages",
    "pilake_stream_freshness_seconds_bucket",
    "pilake_stream_freshness_seconds_count",
    "pilake_stream_freshness_seconds_sum",
)


def p95(window: list[dict[str, float]]) -> float | None:
    """histogram_quantile(0.95, increase of the freshness buckets over `window`) as Prometheus
    computes it (linear within the bucket); counter resets (a restarted worker) added back,
    scrapes of nothing ({}) skipped. None with no increase."""
    increases: dict[float, float] = {}
    prev: dict[float, float] | None = None
    for scrape in window:
        now = {
            float(k.split('le="', 1)[1].split('"', 1)[0]): v
            for k, v in scrape.items()
            if k.startswith("pilake_stream_freshness_seconds_bucket{")
        }
        if not now:
            continue
        if prev is not None:
            for le, v in now.items():
                before = prev.get(le, 0.0)
                increases[le] = increases.get(le, 0.0) + (v - before if v >= before else v)
        prev = now
    bounds = sorted(increases)
    if not bounds or increases[bounds[-1]] <= 0:
        return None
    rank = 0.95 * increases[bounds[-1]]
    lower, below = 0.0, 0.0
    for le in bounds:
        if increases[le] >= rank:
            if le == float("inf"):
                return lower
            return lower + (le - lower) * (rank - below) / max(increases[le] - below, 1e-12)
        lower, below = le, increases[le]
    return None


def record_freshness_outage(tmp: Path, uploader_port: int) -> dict[str, Any]:
    from confluent_kafka import Producer
    from pi_format import RAW_TOPIC
    from pi_format.wire import encode_episode
    from pi_jobs.local.faults import FaultStack
    from pi_jobs.local.faults._messages import simulated

    from scripts.alert_metrics_cases import _uploader
    from scripts.record_alert_metrics import _scrape
    from tests.conftest import _free_port
    from tests.fixtures.seaweedfs import seaweedfs

    total = int((OUTAGE_AFTER + OUTAGE_S + MAX_SCRAPES_AFTER) * EPISODES_PER_S) + 2
    robots = simulated(9960, robots=2, episodes=total // 2 + 1)
    first_ep, robots = robots[0], robots[1:]
    name = "freshness_outage"
    jar_cache = Path(tempfile.gettempdir()) / "pilake-record-jars"
    stream_first = _free_port()
    ports = list(range(stream_first, stream_first + 4))
    env = {"PILAKE_STREAM_METRICS_PORT": str(stream_first), "PILAKE_METRICS_PORT_RANGE": "4"}
    got: list[dict[str, float]] = []
    stop = threading.Event()
    sent: list[int] = []
    with (
        seaweedfs(tmp / "seaweedfs-outage", s3_port=_free_port()) as s3,
        FaultStack(tmp / name, jar_cache=jar_cache) as stack,
    ):
        stack.start_broker()
        lake_env = {"PILAKE_LAKE": s3.uri("lake"), **s3.storage_options}
        with _uploader(stack, name, uploader_port) as up:
            stream = stack.start_stream(extra_env={**env, **lake_env})
            up.submit(first_ep)
            deadline = time.monotonic() + 300
            while not up.poll_acks(0.5):  # the job works: an episode committed and acknowledged
                up.send_pending()
                if not stream.alive() or time.monotonic() > deadline:
                    raise RuntimeError(f"no ack within 300 s:\n{stream.output()[-3000:]}")

            def robot() -> None:  # the robots keep sending, whatever the lake does
                producer = Producer({"bootstrap.servers": stack.bootstrap, "linger.ms": 0})
                while robots and not stop.wait(1.0 / EPISODES_PER_S):
                    episode = robots.pop()
                    for value in encode_episode(episode):
                        producer.produce(RAW_TOPIC, key=episode.episode_id.encode(), value=value)
                    producer.flush(10)
                    sent.append(1)

            sender = threading.Thread(target=robot, daemon=True)
            sender.start()
            stopped_at: float | None = None
            back_at: int | None = None
            held = 0
            try:
                while True:
                    tick = time.monotonic()
                    scrape: dict[str, float] = {}
                    for port in ports:
                        try:
                            scrape = _scrape(port)
                            break
                        except Exception:  # restarting: no worker serves
                            continue
                    scrape = {k: v for k, v in scrape.items() if k.split("{", 1)[0] in KEPT_NAMES}
                    got.append(scrape)
                    i = len(got) - 1
                    if i == OUTAGE_AFTER:
                        s3.stop()
                        stopped_at = time.monotonic()
                    down_s = 0.0 if stopped_at is None else time.monotonic() - stopped_at
                    if back_at is None and down_s >= OUTAGE_S:
                        s3.start()
                        back_at = i
                    if back_at is not None:
                        late = p95(got[-11:])
                        held = held + 1 if late is not None and late > THRESHOLD_S else 0
                        if held >= FIRE_HOLD:
                            break
                        if i - back_at > MAX_SCRAPES_AFTER:
                            Path(tempfile.gettempdir(), f"{name}-failed.json").write_text(json.dumps(got))
                            raise RuntimeError(f"p95 freshness never held > {THRESHOLD_S} s long enough")
                    if not stream.alive():
                        raise RuntimeError(f"stream job exited:\n{stream.output()[-3000:]}")
                    time.sleep(max(0.0, 1.0 - (time.monotonic() - tick)))
            finally:
                stop.set()
                sender.join(timeout=30)
                stream.stop()
        for spool in stack.spool_dirs:
            shutil.rmtree(spool, ignore_errors=True)
    gc.collect()
    return {
        "scrapes": {"stream": got},
        "store": f"SeaweedFS, stopped after scrape {OUTAGE_AFTER} for {OUTAGE_S:g} s (back at {back_at})",
        "robots": f"{EPISODES_PER_S:g} episode a second through Kafka throughout ({len(sent)} sent)",
        "stop": f"once p95 freshness over 10 scrapes held > {THRESHOLD_S:g} s for {FIRE_HOLD} scrapes",
    }
