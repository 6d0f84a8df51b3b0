"""Metrics you can see: the stream job's worker endpoint scraped over HTTP while the real job
(real broker, local mini-cluster) ingests a few episodes, `pilake status`'s metrics section, and
the Grafana dashboard, whose every query must use the names the code registers."""

from __future__ import annotations

import json
import re
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable
from pi_format import LakeLayout
from pi_format.wire import encode_episode

from tests.conftest import _free_port
from tests.fixtures.stream_jobs import small_stream_job
from tests.jobs.test_stream_job import _episode

integration = pytest.mark.integration
DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "pilake.json"


def _registered_names() -> set[str]:
    """Every series name the four metric modules export, as collected from their registries."""
    from pi_ingest import _metrics as ingest_metrics
    from pi_jobs.stream import _metrics as stream_metrics
    from pi_loader.delivery import _metrics as loader_metrics
    from pi_train._live_metrics import LiveMetrics

    # registered by a running worker only; describe() names its families without a broker
    lag = stream_metrics.LagCollector(
        bootstrap_servers="127.0.0.1:1", topic="t", client_options={}, offsets=lambda: {}
    )
    names = set()
    with LiveMetrics(port=_free_port(), rank=0, global_batch=1) as trainer:  # a run's registry
        families = [
            *ingest_metrics.REGISTRY.collect(),
            *stream_metrics.REGISTRY.collect(),
            *loader_metrics.REGISTRY.collect(),
            *lag.describe(),
            *trainer.registry.collect(),
        ]
    for family in families:
        names.add(family.name + "_total" if family.type == "counter" else family.name)
    return names


def test_dashboard_queries_use_exactly_the_registered_names() -> None:
    from pi_ingest._metrics import METRIC_NAMES as INGEST
    from pi_jobs.stream._metrics import METRIC_NAMES as STREAM
    from pi_loader.delivery._metrics import METRIC_NAMES as LOADER
    from pi_train._live_metrics import METRIC_NAMES as TRAIN

    registered = _registered_names()
    declared = set(INGEST) | set(STREAM) | set(LOADER) | set(TRAIN)
    assert declared == registered  # the modules' name lists are what they really export
    doc = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in doc["panels"] for t in p.get("targets", [])]
    assert exprs
    used = set()
    for expr in exprs:
        for name in re.findall(r"\bpilake_[a-z0-9_]+", expr):
            used.add(re.sub(r"_(bucket|sum|count)$", "", name) if "_seconds_" in name else name)
    from pi_jobs.integrity._metrics import METRIC_NAMES as VERIFY  # a verify run's file/push

    assert used - registered - set(VERIFY) == set(), "dashboard queries name metrics the code does not export"
    assert registered - used == set(), "metrics the code registers but no panel shows"


@integration
def test_stream_worker_metrics_equal_what_the_job_did(
    broker: str, stack_settings: Any, tmp_path: Path
) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    from pi_jobs.ops.metrics_view import Scrape, render, scrape
    from pi_jobs.stream import run_stream_job

    run = uuid.uuid4().hex[:8]
    raw_topic, ack_topic = f"mt-raw-{run}", f"mt-ack-{run}"
    admin = AdminClient({"bootstrap.servers": broker})
    for future in admin.create_topics(
        [NewTopic(raw_topic, num_partitions=2, replication_factor=1), NewTopic(ack_topic, 1, 1)]
    ).values():
        future.result(timeout=10)
    episodes = [_episode(i) for i in range(3)]
    delivered: list[tuple[int, int, int]] = []  # (partition, offset, bytes)

    def on_delivery(err: Any, msg: Any) -> None:
        assert err is None, err
        delivered.append((msg.partition(), msg.offset(), len(msg.value())))

    producer = Producer({"bootstrap.servers": broker, "enable.idempotence": True, "linger.ms": 5})
    for ep in episodes:
        for value in encode_episode(ep, payload_bytes=4096):
            producer.produce(raw_topic, key=ep.episode_id.encode(), value=value, on_delivery=on_delivery)
    producer.produce(raw_topic, key=b"junk-key", value=b"not a pi-lake chunk", on_delivery=on_delivery)
    assert producer.flush(30) == 0

    first = _free_port()
    ports = (first, first + 3)  # the worker takes the first free one
    config = small_stream_job(
        broker=broker,
        root=tmp_path,
        jar_dir=stack_settings.jar_dir,
        raw_topic=raw_topic,
        ack_topic=ack_topic,
        group_id=f"mt-group-{run}",
        metrics_ports=ports,
    )

    # Scrape while the job runs (its worker's endpoint goes away with it): keep the latest scrape.
    latest: dict[str, Scrape] = {}
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            for port in range(ports[0], ports[1] + 1):
                got = scrape(f"http://127.0.0.1:{port}/metrics", "stream", timeout_s=5.0)
                if got is not None and not got.error:
                    latest["scrape"] = got
            stop.wait(0.5)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        # idle 20 s: the endpoint stays up (and is scraped) well after the last commit
        report = run_stream_job(config, until_idle=True, idle_timeout_s=20.0, max_runtime_s=300)
    finally:
        stop.set()
        watcher.join(timeout=30)
    assert report.episodes_committed == 3
    s = latest.get("scrape")
    assert s is not None, "the worker's /metrics never answered"

    committed_rows = DeltaTable(LakeLayout(config.lake_root).episodes).to_pyarrow_table()
    assert s.total("pilake_stream_episodes_committed_total") == committed_rows.num_rows == 3
    assert s.total("pilake_stream_episodes_in_total") == 3
    assert s.total("pilake_stream_messages_total") == len(delivered) == report.messages
    assert s.total("pilake_stream_bytes_in_total") == sum(b for _, _, b in delivered) == report.bytes_in
    assert sum(s.by_label("pilake_stream_episodes_quarantined_total", "reason").values()) == 1
    assert s.total("pilake_stream_freshness_seconds_count") == 3
    assert s.total("pilake_stream_commit_seconds_count") >= 1
    assert s.total("pilake_stream_bytes_written_total") > 0
    last = {p: max(o for q, o, _ in delivered if q == p) for p, _, _ in delivered}
    offsets = {int(k): v for k, v in s.by_label("pilake_stream_partition_offset", "partition").items()}
    assert offsets == last
    lag = s.by_label("pilake_stream_consumer_lag_messages", "partition")
    assert set(lag) == {"0", "1"} and all(v == 0 for v in lag.values()), lag  # caught up
    assert s.quantile("pilake_stream_freshness_seconds", 0.5) is not None
    text = "\n".join(render([s]))
    assert "3 committed" in text and "consumer lag by partition: 0 0, 1 0" in text


def test_status_says_when_nothing_serves(tmp_path: Path) -> None:
    from pi_jobs.ops.metrics_view import metrics_lines
    from pi_jobs.settings import Settings

    free = _free_port()
    settings = Settings(
        home=tmp_path, uploader_metrics_port=free, stream_metrics_port=0, loader_metrics_port=0
    )
    assert metrics_lines(settings) == [f"metrics: nothing serves on uploader {free}"]


def test_status_shows_a_live_endpoint(tmp_path: Path) -> None:
    from pi_jobs.ops.metrics_view import metrics_lines
    from pi_jobs.settings import Settings
    from pi_loader.delivery import _metrics
    from prometheus_client import start_http_server

    port = _free_port()
    server, thread = start_http_server(port, addr="127.0.0.1", registry=_metrics.REGISTRY)
    try:
        settings = Settings(
            home=tmp_path,
            uploader_metrics_port=0,
            stream_metrics_port=0,
            loader_metrics_port=port,
            metrics_port_range=1,
        )
        lines = metrics_lines(settings)
        assert lines[0] == f"loader http://127.0.0.1:{port}/metrics"
        assert "samples" in lines[1] and "cache hit ratio" in lines[2]
        assert "s for batches" in lines[1]  # the consumer's wait (PilakeLoaderStarved's signal)
    finally:
        server.shutdown()
        thread.join(timeout=10)


@pytest.mark.parametrize(
    ("variable", "component"),
    [
        ("PILAKE_UPLOADER_METRICS_PORT", "uploader"),
        ("PILAKE_STREAM_METRICS_PORT", "stream"),
        ("PILAKE_LOADER_METRICS_PORT", "loader"),
    ],
)
def test_metrics_port_zero_is_off_for_every_component(tmp_path: Path, variable: str, component: str) -> None:
    # issue 31: "0 = off" must hold wherever a metrics port is read (the loader's own reading of
    # PILAKE_LOADER_METRICS_PORT is tested in tests/loader/delivery/test_metrics.py)
    from pi_ingest import UploaderConfig
    from pi_jobs.ops.metrics_view import local_endpoints
    from pi_jobs.settings import Settings
    from pi_jobs.stream import stream_config

    settings = Settings.from_env({"PILAKE_HOME": str(tmp_path), variable: "0"})
    assert component not in {name for name, *_ in local_endpoints(settings)}
    assert {name for name, *_ in local_endpoints(Settings(home=tmp_path))} == {"uploader", "stream", "loader"}
    stream_ports = stream_config(settings).metrics_ports
    assert (stream_ports is None) == (component == "stream")
    # the uploader of `pilake upload | simulate --upload` gets the port as the CLI passes it
    uploader = UploaderConfig("127.0.0.1:1", tmp_path, metrics_port=settings.uploader_metrics_port)
    assert (uploader.metrics_port is None) == (component == "uploader")


def test_pilake_takes_the_loader_port_range_pi_loader_takes(tmp_path: Path) -> None:
    # README documents PILAKE_LOADER_METRICS_PORT=9480-9487 for the loader; pilake's own settings
    # refused it ("must be an integer"), so every pilake command failed with it set
    from pi_jobs.config import ConfigError
    from pi_jobs.settings import Settings

    home = {"PILAKE_HOME": str(tmp_path)}
    assert Settings.from_env({**home, "PILAKE_LOADER_METRICS_PORT": "9480-9487"}).loader_metrics_port == 9480
    assert Settings.from_env({**home, "PILAKE_LOADER_METRICS_PORT": "9481"}).loader_metrics_port == 9481
    for bad in ("9487-9480", "x", "9480-70000"):
        with pytest.raises(ConfigError, match="PILAKE_LOADER_METRICS_PORT must be a port or a range"):
            Settings.from_env({**home, "PILAKE_LOADER_METRICS_PORT": bad})
    (tmp_path / "pilake.toml").write_text("[metrics]\nloader_port = 9490\n")
    from_file = Settings.from_env({**home, "PILAKE_CONFIG": str(tmp_path / "pilake.toml")})
    assert from_file.loader_metrics_port == 9490
