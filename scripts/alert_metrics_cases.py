"""The cases of scripts/record_alert_metrics.py that run more than one process of the stack or
another clock (see its docstring): `pilake verify` on a clean, then damaged lake; the stream job
on a Flink session cluster with Flink's Prometheus reporter while its sink crash-loops or its
checkpoints fail. Each returns {"scrapes": {kind: [scrape, ...]}, ...} as the other cases do."""

from __future__ import annotations

import gc
import shutil
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

VERIFY_SCRAPES = 45  # as the other one-second cases
VERIFY_DAMAGE_AT = 8  # verify_damaged: the scrape after which a byte is flipped and verify runs again


def _parse(text: str, prefix: str = "pilake_verify_") -> dict[str, float]:
    """A textfile's (or endpoint's) series of `prefix`, keyed name{labels} as the scrapes are."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name.startswith(prefix) and not s.name.endswith("_created"):
                labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
                out[f"{s.name}{{{labels}}}"] = s.value
    return out


def _uploader(stack: Any, name: str, port: int) -> Any:
    from pi_ingest import Uploader, UploaderConfig

    spool = stack.home / f"spool-{name}"
    stack.spool_dirs.append(spool)
    return Uploader(
        UploaderConfig(
            stack.bootstrap,
            spool,
            delivery_timeout_s=5.0,
            backoff_initial_s=0.2,
            backoff_max_s=2.0,
            metrics_port=port,
        )
    )


def record_verify_damaged(tmp: Path, uploader_port: int) -> dict[str, Any]:
    """`pilake verify --metrics-file` (the real CLI, a subprocess) on a clean lake, then, after
    scrape VERIFY_DAMAGE_AT, on the same lake with one byte of a steps page flipped (exit 2). The
    file is read once a second as node exporter's textfile collector serves it (a Pushgateway
    serves the same text, pushed)."""
    import os
    import subprocess

    import pyarrow.parquet as pq
    from pi_format import LakeLayout

    from tests.fixtures.raw_lake import write_raw_lake

    lake = tmp / "verify-lake"
    write_raw_lake(lake, robots=1, episodes_per_robot=3)
    prom = tmp / "textfile" / "pilake-verify.prom"
    env = {**os.environ, "PILAKE_HOME": str(tmp / "verify-home"), "PILAKE_LAKE": str(lake)}
    pilake = str(Path(sys.executable).with_name("pilake"))
    cmd = [pilake, "verify", "--no-progress", "--metrics-file", str(prom)]
    codes = [subprocess.run(cmd, env=env, capture_output=True, timeout=600).returncode]

    def flip_and_verify() -> None:
        (path, *_) = sorted(Path(LakeLayout(str(lake)).steps).glob("*.parquet"))
        column = pq.ParquetFile(path).metadata.row_group(0).column(4)
        data = bytearray(path.read_bytes())
        data[column.data_page_offset + column.total_compressed_size - 7] ^= 0x41
        path.write_bytes(bytes(data))
        codes.append(subprocess.run(cmd, env=env, capture_output=True, timeout=600).returncode)

    got: list[dict[str, float]] = []
    wall: list[float] = []
    for i in range(VERIFY_SCRAPES):
        tick = time.monotonic()
        wall.append(time.time())
        got.append(_parse(prom.read_text()))
        if i == VERIFY_DAMAGE_AT:
            flip_and_verify()
        time.sleep(max(0.0, 1.0 - (time.monotonic() - tick)))
    if codes != [0, 2]:
        raise RuntimeError(f"pilake verify exited {codes}, expected [0, 2] (clean, then damaged)")
    return {
        "scrapes": {"verify": got},
        "wall": wall,
        "exit_codes": codes,
        "damaged_after_scrape": VERIFY_DAMAGE_AT,
    }


FLINK_SCRAPE_S = 15.0  # the Flink cases: one scrape every 15 s (= one promtool minute: x4)
FLINK_SCRAPES = 32  # a 15m window and a 5m `for` after the fault, the quiet start before
FLINK_FAULT_AT = 5  # the scrape after which the fault is made
# Flink's job-scope series the alerts read (of the JobManager's Prometheus reporter)
FLINK_KEPT = (
    "flink_jobmanager_job_numRestarts",
    "flink_jobmanager_job_numberOfFailedCheckpoints",
    "flink_jobmanager_job_numberOfCompletedCheckpoints",
    "flink_jobmanager_job_lastCheckpointCompletedTimestamp",
)


def _flink_scrape(ports: list[int]) -> dict[str, float] | None:
    from prometheus_client.parser import text_string_to_metric_families

    for port in ports:  # the JobManager's reporter: the one that serves the job-scope series
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
                text = response.read().decode()
        except Exception:
            continue
        out: dict[str, float] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name in FLINK_KEPT:
                    labels = {k: v for k, v in sample.labels.items() if k in ("job_name",)}
                    inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
                    out[f"{sample.name}{{{inner}}}"] = sample.value
        if out:
            return out
    return None


def _stream_worker_scrape(ports: list[int]) -> dict[str, float] | None:
    """The stream worker's pilake_stream_* series on the first port of its range that answers;
    None while no worker serves (the job restarting)."""
    for port in ports:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
                return _parse(response.read().decode(), "pilake_stream_")
        except Exception:
            continue
    return None


def _flink_case(
    tmp: Path, name: str, uploader_port: int, *, fault: str, scrapes: int = FLINK_SCRAPES
) -> dict[str, Any]:
    """The stream job on a local Flink session cluster (`pilake stream --cluster`: restarts
    without end, as deployed) with Flink's Prometheus reporter; an uploader submits an episode
    every other scrape; after scrape FLINK_FAULT_AT `fault` is made: "lake" (the lake immutable:
    the sink fails at once, the job restarts again and again) or "checkpoints" (the job's
    checkpoint directory immutable: every checkpoint fails). For "checkpoints" the stream
    worker's own endpoint is scraped too ("stream": nothing while a restart has none serving);
    each scrape's wall time is kept ("wall": the render rebases Flink's
    lastCheckpointCompletedTimestamp with it)."""
    import contextlib
    from dataclasses import replace

    from pi_jobs.local.faults import FaultStack
    from pi_jobs.local.faults._messages import simulated
    from pi_jobs.local.faults._scenarios import unwritable
    from pi_jobs.local.flink_cluster import LocalClusterConfig, start_local_cluster, stop_local_cluster

    from tests.conftest import _free_port

    jar_cache = Path(tempfile.gettempdir()) / "pilake-record-jars"
    url = f"http://127.0.0.1:{_free_port()}"
    first = _free_port()
    reporter = (
        (
            "metrics.reporter.prom.factory.class",
            "org.apache.flink.metrics.prometheus.PrometheusReporterFactory",
        ),
        ("metrics.reporter.prom.port", f"{first}-{first + 1}"),
    )
    episodes = simulated(9500 + len(name), robots=1, episodes=scrapes)
    got: list[dict[str, float]] = []
    worker: list[dict[str, float]] = []
    wall: list[float] = []
    worker_first = _free_port()
    worker_env = {"PILAKE_STREAM_METRICS_PORT": str(worker_first), "PILAKE_METRICS_PORT_RANGE": "4"}
    with FaultStack(tmp / name, jar_cache=jar_cache) as stack:
        settings = replace(stack.settings, flink_rest_url=url)
        stack.start_broker()
        start_local_cluster(settings, LocalClusterConfig(slots=1, extra=reporter))
        try:
            with _uploader(stack, name, uploader_port) as up, contextlib.ExitStack() as faults:
                submit = stack.start_stream(
                    "--parallelism", "1", extra_env={"PILAKE_FLINK_URL": url, **worker_env}
                )
                up.submit(episodes[0])
                deadline = time.monotonic() + 300
                while not up.poll_acks(0.5):  # the job works: an episode committed and acknowledged
                    up.send_pending()
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"no ack within 300 s:\n{submit.output()[-3000:]}")
                for i in range(scrapes):
                    tick = time.monotonic()
                    wall.append(time.time())
                    worker.append(_stream_worker_scrape(list(range(worker_first, worker_first + 4))) or {})
                    scraped = _flink_scrape([first, first + 1])
                    if scraped is None:
                        raise RuntimeError(f"no job-scope series on the reporter ports {first}-{first + 1}")
                    got.append(scraped)
                    if i == FLINK_FAULT_AT:
                        if fault == "lake":
                            target = Path(settings.lake_root)
                        else:  # the job's own checkpoint directory (<dir>/<job id>/chk-N)
                            (target,) = {p.parent for p in stack.home.rglob("chk-*") if p.is_dir()}
                        if not faults.enter_context(unwritable(target)):
                            raise RuntimeError(f"could not make {target} unwritable here")
                    if i % 2 == 1 and 1 + i // 2 < len(episodes):
                        up.submit(episodes[1 + i // 2])
                    while time.monotonic() - tick < FLINK_SCRAPE_S:
                        up.send_pending()
                        up.poll_acks(0.5)
        finally:
            stop_local_cluster(settings)
        for spool in stack.spool_dirs:
            shutil.rmtree(spool, ignore_errors=True)
    gc.collect()
    return {
        "scrapes": {"flink": got, **({"stream": worker} if fault == "checkpoints" else {})},
        "wall": wall,
        "scrape_s": FLINK_SCRAPE_S,
        "fault": f"{fault} made unwritable (chattr +i) after scrape {FLINK_FAULT_AT}",
    }


def record_sink_crash_looping(tmp: Path, uploader_port: int) -> dict[str, Any]:
    return _flink_case(tmp, "sink_crash_looping", uploader_port, fault="lake")


def record_checkpoints_failing(tmp: Path, uploader_port: int) -> dict[str, Any]:
    # 42 scrapes: the last checkpoint (at the fault) is more than 30 promtool minutes old for
    # PilakeStreamCheckpointOld's 5m `for` before the end
    return _flink_case(tmp, "checkpoints_failing", uploader_port, fault="checkpoints", scrapes=42)


LOADER_FREEZE_AFTER = 5  # loader_store_frozen: the scrape after which SeaweedFS is SIGSTOPped


def record_loader_store_frozen(tmp: Path, uploader_port: int) -> dict[str, Any]:
    """A loader reading a lake on SeaweedFS (one file per episode and table, a cold host cache),
    its consumer working 0.2 s per batch (as loader_healthy's); the recording starts with the first
    batch handed out; after scrape LOADER_FREEZE_AFTER
    the store is frozen (SIGSTOP: it holds its connections and answers nothing) for the rest of
    the recording: the workers' reads wait on their timeouts and retries (RetryConfig deadline
    900 s: the loader must not give up within the recording), the consumer waits in next()."""
    import os
    import signal
    import threading

    from pi_jobs.local.object_store import _read_state
    from pi_loader import CacheConfig, Dataset, Loader, RetryConfig, SampleSpec, ShardSpec
    from pi_loader.delivery import _metrics as loader_metrics
    from pi_loader.reading._storage import S3Options

    from tests.conftest import _free_port
    from tests.fixtures.lake_factory import write_lake
    from tests.fixtures.seaweedfs import seaweedfs

    local = tmp / "lake-frozen"
    write_lake(
        local, episodes=48, steps=12, cameras=("front",), size=(32, 32), garbage_attempt=False, group=1
    )
    got: list[dict[str, float]] = []
    with seaweedfs(tmp / "seaweedfs-loader", s3_port=_free_port()) as s3:
        fs = S3Options.from_storage_options(s3.storage_options).filesystem()
        for path in sorted(local.rglob("*")):
            if path.is_file():
                with fs.open_output_stream(f"{s3.bucket}/lake/{path.relative_to(local)}") as out:
                    out.write(path.read_bytes())
        dataset = Dataset(
            s3.uri("lake"),
            spec=SampleSpec(action_horizon=4),
            seed=1,
            storage_options=s3.storage_options,
            cache=CacheConfig(tmp / "loader-cache", 10**9),
            retry=RetryConfig(deadline_s=900, connect_timeout_s=2, request_timeout_s=5),
        )
        pid = _read_state(s3.run_dir)["pid"]
        assert isinstance(pid, int)
        port = loader_metrics.served_port() or _free_port()
        stop = threading.Event()
        with Loader(
            dataset, batch_size=8, num_workers=1, prefetch_batches=2, shard=ShardSpec(0, 1), metrics_port=port
        ) as loader:
            port = loader_metrics.served_port() or port

            def consume() -> None:
                while not stop.is_set():
                    for _batch in loader:
                        if stop.is_set():
                            return
                        time.sleep(0.2)  # the training step

            thread = threading.Thread(target=consume, daemon=True)
            thread.start()
            try:
                frozen_at = None
                deadline = time.monotonic() + 240
                while len(got) < VERIFY_SCRAPES:
                    tick = time.monotonic()
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
                        scrape = _parse_loader(response.read().decode())
                    if not got and scrape["pilake_loader_batches_total{}"] < 1:
                        if time.monotonic() > deadline:  # counting starts once batches come
                            raise RuntimeError("the loader delivered no batch within 240 s")
                        time.sleep(0.5)
                        continue
                    got.append(scrape)
                    if frozen_at is None and len(got) > LOADER_FREEZE_AFTER:
                        os.killpg(pid, signal.SIGSTOP)
                        frozen_at = len(got) - 1
                    time.sleep(max(0.0, 1.0 - (time.monotonic() - tick)))
            finally:
                stop.set()
                os.killpg(pid, signal.SIGCONT)  # thawed: the blocked reads end, the loader closes
                thread.join(timeout=120)
    return {
        "scrapes": {"loader": got},
        "store": f"SeaweedFS, SIGSTOP after scrape {LOADER_FREEZE_AFTER}",
        "consumer_s_per_batch": 0.2,
    }


def _parse_loader(text: str) -> dict[str, float]:
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name.startswith("pilake_loader_") and not s.name.endswith("_created"):
                labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
                out[f"{s.name}{{{labels}}}"] = s.value
    return out
