"""Record the series the stack serves while a failure is produced for real, and render the alerts'
promtool unit tests from them.

    .venv/bin/python scripts/record_alert_metrics.py           # record every case, then render
    .venv/bin/python scripts/record_alert_metrics.py CASE ...  # record these cases again, render
    .venv/bin/python scripts/record_alert_metrics.py --render  # render from the committed record

Each case runs the real thing (the Tansu broker, `pilake stream` as a subprocess with its Flink
JVM and Python workers, `pi_ingest.Uploader`, `pi_loader.Loader`) and scrapes their /metrics
over HTTP once a second, as Prometheus would:

- healthy: the stream job runs, an uploader submits an episode every few seconds and each is
  committed and acknowledged;
- store_down: the lake is on SeaweedFS (S3); the store is stopped under the running job while
  the uploader keeps submitting: the sink's group commits retry and nothing is committed;
- uploader_never_acked: an uploader submits episodes and no stream job runs;
- broker_down: an uploader whose broker stopped before it uploads: its sends fail;
- loader_healthy: a loader (default global shuffle) whose consumer works 0.2 s per batch: no
  alert may fire (the old PilakeLoaderCacheCold did: video-chunk hit ratio 0.22);
- loader_starved: a loader that cannot keep up: one worker decoding 2 cameras of 320x240 frames
  with a frame of history, for a consumer that asks for the next batch at once (a fast training
  step): the consumer waits in next() most of the time (pilake_loader_wait_seconds_total);
- loader_store_frozen: a loader reading a lake on SeaweedFS (cold host cache), consumer at 0.2 s
  per batch; the store SIGSTOPped after 5 scrapes: the consumer waits, no batch comes;
- verify_damaged: `pilake verify --metrics-file` on a clean lake, then on the lake with a byte
  of a steps page flipped (exit 2): pilake_verify_damaged_places 0, then 1 (the file read once a
  second, as node exporter's textfile collector serves it);
- sink_crash_looping: the stream job on a local Flink session cluster (`pilake stream --cluster`,
  restarts without end as deployed) with Flink's Prometheus reporter; after 5 scrapes the lake is
  made immutable (chattr +i): the sink fails at once, Flink restarts the job again and again;
- checkpoints_failing: the same, but the job's checkpoint directory is made immutable: every
  checkpoint fails (and, tolerating none, Flink restarts the job); 42 scrapes, so that the last
  completed checkpoint grows more than 30 (stretched) minutes old; it scrapes the stream worker
  too (its endpoint answers nothing while the job restarts: PilakeStreamJobDown must stay quiet
  on the short gaps). sink_crash_looping does not: rerecorded with it, no worker answered in the
  26 scrapes after the fault (no episodes_in either: PilakeStreamNotCommitting is recorded on
  all_refused);
- job_down: the healthy stream job, SIGKILLed (driver, JVM, worker) after 8 scrapes: its
  endpoint stops answering (recorded as serving nothing);
- quarantine_rising: the healthy stream job and uploader, and a robot sending bad messages (a
  flipped bit, a truncated chunk, an oversize message, protocol version 2) every 4 scrapes;
- store_down_backlog: store_down while robots keep sending (2 episodes a second in 256-byte
  chunks once the store is down): the blocked sink reads none, the lag passes 1,000 messages;
- verify_stopped: `pilake verify --metrics-file` run "daily" (every 24 scrapes, one scrape =
  one promtool hour), 3 times, then never again: its last figures stay, only their age grows;
- freshness_outage (scripts/alert_metrics_outage.py): the lake on SeaweedFS stopped for 380 s
  (more than PilakeFreshnessSlow's 300 s) while robots keep sending 2 episodes a second, then
  started again: the job (restarted by Flink meanwhile) commits the backlog, each episode as late
  as it waited; the recording stops once p95 freshness held > 300 s for 19 scrapes;
- all_refused (scripts/alert_metrics_refused.py): the healthy job, then only robots of a type
  robots.toml does not list send: every episode comes in and is quarantined
  (unknown_robot_type), none is committed (PilakeStreamNotCommitting).
Flink's lastCheckpointCompletedTimestamp and pilake_verify_last_run_timestamp_seconds are Unix
times: those cases keep each scrape's wall time, and the render rebases them onto promtool's
clock (scripts/alert_metrics_values.py).
The Flink cases scrape every 15 s (FLINK_SCRAPE_S: a restart takes its back-off, up to 30 s,
plus a restore), so their stretch is 4, not 60 (the case's "scrape_s").

The scrapes go to deploy/prometheus/testdata/alert_metrics.json.gz (gzipped JSON) as served (the
pilake_* series the alerts and their neighbours read). `--render` writes
deploy/prometheus/alerts_test.yaml: each recorded scrape becomes one minute of promtool input
(the runs last seconds; the alerts need tens of minutes), so the time axis is stretched 60
times. Counters and their rates keep their ratios under that stretch; the series measured in
seconds of wall time (pilake_uploader_oldest_spooled_seconds, pilake_loader_wait_seconds_total)
are multiplied by 60 with it. Histogram buckets are rendered as served (the freshness
histogram's `le` values are the code's FRESHNESS_BUCKETS).
tests/deploy/test_prometheus.py checks that the committed test file is what `--render` makes
of the committed record, so no value in it is typed by hand.

The alerts whose series come from programs that only run in a cluster (Kafka's under Strimzi,
ClickHouse's endpoint, kube-state-metrics' failed Jobs) keep hand-written cases in
alerts_static_test.yaml.
"""

from __future__ import annotations

import argparse
import gc
import platform
import shutil
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root
from scripts.alert_metrics_cases import (
    FLINK_KEPT,
    _uploader,
    record_checkpoints_failing,
    record_loader_store_frozen,
    record_sink_crash_looping,
    record_verify_damaged,
)
from scripts.alert_metrics_more import (
    record_job_down,
    record_quarantine_rising,
    record_store_down_backlog,
    record_verify_stopped,
)
from scripts.alert_metrics_outage import record_freshness_outage
from scripts.alert_metrics_refused import record_all_refused
from scripts.alert_metrics_render import CASE_ORDER, FIRING, render
from scripts.alert_metrics_values import load_record, save_record

__all__ = ["CASES", "FLINK_KEPT", "RECORD", "load_record", "main", "record", "render", "save_record"]

ROOT = Path(__file__).resolve().parents[1]
# gzipped JSON (alert_metrics_values.save_record): ~1 MB of JSON
RECORD = ROOT / "deploy" / "prometheus" / "testdata" / "alert_metrics.json.gz"
TEST_FILE = ROOT / "deploy" / "prometheus" / "alerts_test.yaml"
STORE_STOP_AT = 8  # store_down: the scrape after which the object store is stopped
SCRAPES = 45  # per case: enough for a 10m window plus a 30m `for` (stretched)
# the series kept from each endpoint (the _created gauges and help text are not)
KEPT_PREFIXES = ("pilake_uploader_", "pilake_stream_", "pilake_loader_", "pilake_verify_")
DROPPED_SUFFIXES = ("_created",)


def _scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return _kept(response.read().decode())


def _kept(text: str) -> dict[str, float]:
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if not s.name.startswith(KEPT_PREFIXES) or s.name.endswith(DROPPED_SUFFIXES):
                continue
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
            out[f"{s.name}{{{labels}}}"] = s.value
    return out


def _record_scrapes(
    ports: dict[str, list[int]],
    scrapes: int,
    *,
    step: Callable[[int], None] | None = None,
    ready: Callable[[], bool] | None = None,
    idle: Callable[[], None] | None = None,
    vanish: tuple[str, ...] = (),
) -> dict[str, list[dict[str, float]]]:
    """Scrape each kind's ports once a second `scrapes` times, counting from the first second
    every kind answers (a stream worker serves only once Flink started it) and `ready()` holds
    (`idle()` runs meanwhile); `step(i)` runs after scrape i (submit an episode, say). A kind of
    `vanish` that stops answering once counting started is recorded as serving nothing."""
    got: dict[str, list[dict[str, float]]] = {kind: [] for kind in ports}
    started = time.monotonic()
    while len(next(iter(got.values()))) < scrapes:
        tick = time.monotonic()
        if ready is not None and not got[next(iter(got))] and not ready():
            if idle is not None:
                idle()
            if time.monotonic() - started > 240:
                raise RuntimeError("not ready within 240 s")
            time.sleep(0.5)
            continue
        now: dict[str, dict[str, float]] = {}
        for kind, kind_ports in ports.items():
            for port in kind_ports:
                try:
                    now[kind] = _scrape(port)
                    break
                except Exception:  # nothing there yet, or another program's port of the range
                    continue
        if got[next(iter(got))]:
            now.update({kind: {} for kind in vanish if kind not in now})
        if len(now) == len(ports):
            for kind, series in now.items():
                got[kind].append(series)
            if step is not None:
                step(len(got[kind]) - 1)
        elif time.monotonic() - started > 240:
            raise RuntimeError(f"no metrics from {sorted(set(ports) - set(now))} within 240 s")
        time.sleep(max(0.0, 1.0 - (time.monotonic() - tick)))
    return got


def _stream_case(
    tmp: Path,
    name: str,
    *,
    lake_env: dict[str, str] | None,
    uploader_port: int,
    store: Any = None,
    kinds: tuple[str, ...] = ("uploader", "stream"),
    on_step: Callable[[int, Any, Any], None] | None = None,
    vanish: tuple[str, ...] = (),
    uploads: bool = True,
) -> Any:
    """Run `pilake stream` and an uploader submitting an episode, then one every 5 scrapes; `store`
    (a SeaweedFS) is stopped at scrape STORE_STOP_AT; `on_step(i, stream, stack)` runs after scrape i
    (the fault of a case); a kind of `vanish` may stop serving (the job killed); `uploads=False`:
    the uploader submits only the first episode (the case's robots send the rest)."""
    from pi_jobs.local.faults import FaultStack
    from pi_jobs.local.faults._messages import simulated

    from tests.conftest import _free_port

    jar_cache = Path(tempfile.gettempdir()) / "pilake-record-jars"
    stream_first = _free_port()
    env = {"PILAKE_STREAM_METRICS_PORT": str(stream_first), "PILAKE_METRICS_PORT_RANGE": "4"}
    episodes = simulated(9100 + len(name), robots=1, episodes=10)
    with FaultStack(tmp / name, jar_cache=jar_cache) as stack:
        stack.start_broker()
        with _uploader(stack, name, uploader_port) as up:
            stream = stack.start_stream(extra_env={**env, **(lake_env or {})})
            # PyFlink starts the sink's Python worker (and so its /metrics) with the first record;
            # the recording starts once it is acknowledged (a job that works, whose start-up
            # is not counted as an episode's wait)
            up.submit(episodes[0])
            acked: list[Any] = []

            def idle() -> None:
                up.send_pending()
                acked.extend(up.poll_acks(0.2))
                if not stream.alive():
                    raise RuntimeError(f"stream job exited:\n{stream.output()[-3000:]}")

            def step(i: int) -> None:
                if store is not None and i == STORE_STOP_AT:
                    store.stop()  # the object store goes down under the running job
                if uploads and i % 5 == 4 and 1 + i // 5 < len(episodes):
                    up.submit(episodes[1 + i // 5])
                if on_step is not None:
                    on_step(i, stream, stack)
                up.send_pending()
                up.poll_acks(0.2)
                if not stream.alive() and "stream" not in vanish:
                    raise RuntimeError(f"stream job exited:\n{stream.output()[-3000:]}")

            ports = {"uploader": [uploader_port], "stream": list(range(stream_first, stream_first + 4))}
            got = _record_scrapes(
                {k: ports[k] for k in kinds},
                SCRAPES,
                step=step,
                ready=lambda: bool(acked),
                idle=idle,
                vanish=vanish,
            )
            stream.stop()
        for spool in stack.spool_dirs:  # the next case's spool gauges start empty
            shutil.rmtree(spool, ignore_errors=True)
    gc.collect()
    return got


def record_healthy(tmp: Path, uploader_port: int) -> dict[str, Any]:
    return {"scrapes": _stream_case(tmp, "healthy", lake_env=None, uploader_port=uploader_port)}


def record_store_down(tmp: Path, uploader_port: int) -> dict[str, Any]:
    """The lake on SeaweedFS (S3), stopped under the running job: the sink's group commits
    retry (dependency_retry_s, 120 s, outlasts the recording). Only the stream job's endpoint
    is kept: the uploader's alerts need longer than the recording after the stop."""
    from tests.conftest import _free_port
    from tests.fixtures.seaweedfs import seaweedfs

    with seaweedfs(tmp / "seaweedfs", s3_port=_free_port()) as s3:
        lake_env = {"PILAKE_LAKE": s3.uri("lake"), **s3.storage_options}
        scrapes = _stream_case(
            tmp, "store_down", lake_env=lake_env, uploader_port=uploader_port, store=s3, kinds=("stream",)
        )
    return {"scrapes": scrapes, "store": f"SeaweedFS, stopped at scrape {STORE_STOP_AT}"}


def record_uploader_never_acked(tmp: Path, uploader_port: int) -> dict[str, Any]:
    from pi_jobs.local.faults import FaultStack
    from pi_jobs.local.faults._messages import simulated

    episodes = simulated(9300, robots=1, episodes=6)
    jar_cache = Path(tempfile.gettempdir()) / "pilake-record-jars"
    with FaultStack(tmp / "never_acked", jar_cache=jar_cache) as stack:
        stack.start_broker()
        with _uploader(stack, "never-acked", uploader_port) as up:

            def step(i: int) -> None:
                if i < len(episodes):
                    up.submit(episodes[i])
                up.send_pending()
                up.poll_acks(0.2)

            got = _record_scrapes({"uploader": [uploader_port]}, SCRAPES, step=step)
        # this process serves one uploader endpoint for every case: the next case must not see
        # this spool's never-acknowledged episodes
        for spool in stack.spool_dirs:
            shutil.rmtree(spool, ignore_errors=True)
    gc.collect()
    return {"scrapes": got}


def record_broker_down(tmp: Path, uploader_port: int) -> dict[str, Any]:
    """An uploader whose broker stopped before it uploads: its sends fail (delivery timeout),
    nothing is sent, the spool fills. The uploader works in its own thread, as a robot's does,
    so a send waiting for its timeout never delays a scrape."""
    from pi_jobs.local.faults import FaultStack
    from pi_jobs.local.faults._messages import simulated
    from pi_jobs.local.stack import stop_broker

    episodes = simulated(9400, robots=1, episodes=6)
    jar_cache = Path(tempfile.gettempdir()) / "pilake-record-jars"
    stop = threading.Event()
    with FaultStack(tmp / "broker_down", jar_cache=jar_cache) as stack:
        stack.start_broker()
        with _uploader(stack, "broker-down", uploader_port) as up:
            stop_broker(stack.settings)  # the broker goes away

            def robot() -> None:
                for i in range(10_000):
                    if stop.is_set():
                        return
                    if i < len(episodes):
                        up.submit(episodes[i])
                    up.send_pending()
                    up.poll_acks(0.2)
                    stop.wait(1.0)

            thread = threading.Thread(target=robot, daemon=True)
            thread.start()
            try:
                got = _record_scrapes({"uploader": [uploader_port]}, SCRAPES)
            finally:
                stop.set()
                thread.join(timeout=60)
        for spool in stack.spool_dirs:
            shutil.rmtree(spool, ignore_errors=True)
    gc.collect()
    return {"scrapes": got}


def _loader_case(
    tmp: Path, name: str, *, size: tuple[int, int], consumer_s: float, frame_history: int = 0
) -> dict[str, Any]:
    from pi_loader import Dataset, Loader, SampleSpec, ShardSpec
    from pi_loader.delivery import _metrics as loader_metrics

    from tests.conftest import _free_port
    from tests.fixtures.lake_factory import write_lake

    lake = write_lake(
        tmp / f"lake-{name}",
        episodes=4,
        steps=48,
        cameras=("front", "wrist"),
        size=size,
        garbage_attempt=False,
    )
    port = loader_metrics.served_port() or _free_port()
    dataset = Dataset(
        lake.layout.root, spec=SampleSpec(action_horizon=4, frame_history=frame_history), seed=1
    )
    stop = threading.Event()
    with Loader(
        dataset, batch_size=8, num_workers=1, prefetch_batches=4, shard=ShardSpec(0, 1), metrics_port=port
    ) as loader:

        def consume() -> None:
            while not stop.is_set():
                for _batch in loader:  # epoch after epoch, as a trainer does
                    if stop.is_set():
                        return
                    if consumer_s:
                        time.sleep(consumer_s)  # the training step

        thread = threading.Thread(target=consume, daemon=True)
        thread.start()
        try:
            got = _record_scrapes({"loader": [loader_metrics.served_port() or port]}, SCRAPES)
        finally:
            stop.set()
            thread.join(timeout=60)
    return {
        "scrapes": got,
        "frames": list(size),
        "frame_history": frame_history,
        "consumer_s_per_batch": consumer_s,
    }


def record_loader_healthy(tmp: Path, uploader_port: int) -> dict[str, Any]:
    # 32x32 frames; the consumer's step takes 0.2 s: a loader that keeps up with its trainer
    return _loader_case(tmp, "healthy", size=(32, 32), consumer_s=0.2)


def record_loader_starved(tmp: Path, uploader_port: int) -> dict[str, Any]:
    # 320x240 frames, a frame of history, one worker; the consumer asks again at once
    return _loader_case(tmp, "starved", size=(320, 240), consumer_s=0.0, frame_history=1)


CASES: dict[str, Callable[[Path, int], dict[str, Any]]] = {
    "store_down": record_store_down,
    "uploader_never_acked": record_uploader_never_acked,
    "broker_down": record_broker_down,
    "healthy": record_healthy,
    "loader_healthy": record_loader_healthy,
    "loader_starved": record_loader_starved,
    "loader_store_frozen": record_loader_store_frozen,
    "verify_damaged": record_verify_damaged,
    "sink_crash_looping": record_sink_crash_looping,
    "checkpoints_failing": record_checkpoints_failing,
    "job_down": record_job_down,
    "quarantine_rising": record_quarantine_rising,
    "store_down_backlog": record_store_down_backlog,
    "verify_stopped": record_verify_stopped,
    "freshness_outage": record_freshness_outage,
    "all_refused": record_all_refused,
}
# every recorded case is rendered and has its expected alerts
assert set(CASES) == set(CASE_ORDER) == set(FIRING), (set(CASES), set(CASE_ORDER), set(FIRING))


def record(names: list[str]) -> dict[str, Any]:
    sys.path.insert(0, str(ROOT))
    from tests.conftest import _free_port

    doc: dict[str, Any] = load_record(RECORD) if RECORD.exists() else {"cases": {}}
    uploader_port = _free_port()  # one uploader endpoint per process, shared by the cases
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            t0 = time.monotonic()
            try:
                case = CASES[name](Path(tmp), uploader_port)
            except Exception as err:  # the other cases still record; this one keeps its old record
                print(f"{name}: FAILED: {err!r}", flush=True)
                continue
            case["recorded"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            doc["cases"][name] = case
            doc["host"] = f"{platform.node()} {platform.machine()}, python {platform.python_version()}"
            doc["scrape"] = "every 1 s over HTTP while the failure is produced"
            save_record(doc, RECORD)
            print(f"{name}: {time.monotonic() - t0:.0f} s", flush=True)
    return doc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cases", nargs="*", help=f"cases to record (default all: {', '.join(CASES)})")
    parser.add_argument("--render", action="store_true", help="render the test from the committed record")
    parser.add_argument("--record-to", type=Path, help="record into this file (merge it by hand)")
    args = parser.parse_args(argv)
    if args.record_to is not None:
        global RECORD
        RECORD = args.record_to
    if not args.render:
        record(args.cases or list(CASES))
    if args.record_to is not None:
        return 0
    TEST_FILE.write_text(render(load_record(RECORD)))
    print(f"wrote {TEST_FILE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
