"""Prometheus for real: Debian's Prometheus 2.42 scrapes the uploader, the stream job and a loader
while they work (real broker, the PyFlink job, the lake it writes) and its HTTP API answers with
what each did; the alert rules in deploy/prometheus/ pass `promtool check rules` and their unit
tests (`promtool test rules`), every alert has a case where it fires, and every series they name is
one the code registers (or Flink's reporter's); the compose scrape configuration passes `promtool
check config` and names ports the compose services serve."""

from __future__ import annotations

import json
import re
import subprocess
import time
import tomllib
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import _free_port
from tests.fixtures.metrics_scrape import scrape
from tests.fixtures.prometheus import Prometheus, running_prometheus, tools

ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS_DIR = ROOT / "deploy" / "prometheus"
ALERTS = PROMETHEUS_DIR / "alerts.yaml"
# rendered by scripts/record_alert_metrics.py from series recorded while each failure was produced
ALERTS_TEST = PROMETHEUS_DIR / "alerts_test.yaml"
# hand-written: the failures of other programs' series and the long outages not recorded
ALERTS_STATIC_TEST = PROMETHEUS_DIR / "alerts_static_test.yaml"
# the training alert's cases: rendered by scripts/record_train_metrics.py from a recorded real run
TRAIN_ALERTS_TEST = PROMETHEUS_DIR / "train_alerts_test.yaml"
COMPOSE = ROOT / "deploy" / "compose" / "compose.yaml"
DASHBOARD = ROOT / "deploy" / "grafana" / "pilake.json"


def _promtool(*args: str) -> str:
    out = subprocess.run(
        [str(tools().promtool), *args], capture_output=True, text=True, timeout=120, cwd=PROMETHEUS_DIR
    )
    assert out.returncode == 0, f"promtool {' '.join(args)}:\n{out.stdout}\n{out.stderr}"
    return out.stdout + out.stderr


def _strimzi_version() -> str:
    return str(tomllib.loads((ROOT / "deploy" / "versions.toml").read_text())["strimzi"]["version"])


def _alerts() -> list[dict[str, Any]]:
    doc = yaml.safe_load(ALERTS.read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def test_alert_rules_pass_promtool_check_and_their_unit_tests() -> None:
    assert f"SUCCESS: {len(_alerts())} rules found" in _promtool("check", "rules", str(ALERTS))
    assert "SUCCESS" in _promtool(
        "test", "rules", str(ALERTS_TEST), str(ALERTS_STATIC_TEST), str(TRAIN_ALERTS_TEST)
    )


def test_every_alert_fires_in_a_unit_test_and_names_registered_series() -> None:
    from pi_ingest._metrics import METRIC_NAMES as INGEST
    from pi_jobs.stream._metrics import METRIC_NAMES as STREAM
    from pi_loader.delivery._metrics import METRIC_NAMES as LOADER
    from pi_train._live_metrics import METRIC_NAMES as TRAIN

    cases = [
        case
        for f in (ALERTS_TEST, ALERTS_STATIC_TEST, TRAIN_ALERTS_TEST)
        for case in yaml.safe_load(f.read_text())["tests"]
    ]
    firing = {t["alertname"] for case in cases for t in case["alert_rule_test"] if t["exp_alerts"]}
    quiet = {t["alertname"] for case in cases for t in case["alert_rule_test"] if not t["exp_alerts"]}
    names = {rule["alert"] for rule in _alerts()}
    assert names == firing, f"alerts without a case where they fire: {names - firing}"
    assert names == quiet, f"alerts without a case where they stay quiet: {names - quiet}"
    from pi_jobs.integrity._metrics import METRIC_NAMES as VERIFY

    registered = set(INGEST) | set(STREAM) | set(LOADER) | set(TRAIN) | set(VERIFY)
    for rule in _alerts():
        for series in re.findall(r"\bpilake_[a-z0-9_]+", rule["expr"]):
            base = re.sub(r"_(bucket|sum|count)$", "", series) if "_seconds_" in series else series
            assert base in registered, f"{rule['alert']}: {series} is not registered"
        for key in ("summary", "description"):
            assert rule["annotations"][key], (rule["alert"], key)


def test_every_alert_signal_has_a_dashboard_panel() -> None:
    """Each series an alert reads is drawn by some panel of deploy/grafana/pilake.json (whose
    pilake_* names tests/jobs/test_metrics.py checks against what the code exports)."""
    doc = json.loads(DASHBOARD.read_text())
    drawn = {
        name
        for panel in doc["panels"]
        for target in panel.get("targets", [])
        for name in re.findall(r"\b[A-Za-z_][A-Za-z0-9_]*", target["expr"])
    }
    for rule in _alerts():
        names = re.findall(r"\b(?:pilake|flink|kafka|kube|ClickHouse)[A-Za-z0-9_]*", rule["expr"])
        assert names, rule["alert"]
        missing = sorted(set(names) - drawn)
        assert not missing, f"{rule['alert']}: no panel draws {missing}"


def _script(name: str) -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


def test_the_alert_cases_are_rendered_from_recorded_failures() -> None:
    """alerts_test.yaml is what scripts/record_alert_metrics.py --render makes of the committed
    record; the record holds what the real stack served while each failure was produced, with
    the series and buckets the code registers (none invented)."""
    from pi_ingest._metrics import METRIC_NAMES as INGEST
    from pi_jobs.integrity._metrics import METRIC_NAMES as VERIFY
    from pi_jobs.stream._metrics import FRESHNESS_BUCKETS
    from pi_jobs.stream._metrics import METRIC_NAMES as STREAM
    from pi_loader.delivery._metrics import METRIC_NAMES as LOADER

    script = _script("record_alert_metrics")
    record = script.load_record(script.RECORD)
    assert ALERTS_TEST.read_text() == script.render(record)
    assert set(record["cases"]) == set(script.CASES), "a case was never recorded"
    # the code's series, and Flink's reporter's job-scope series the alerts read
    registered = set(INGEST) | set(STREAM) | set(LOADER) | set(VERIFY) | set(script.FLINK_KEPT)
    for name, case in record["cases"].items():
        for kind, scrapes in case["scrapes"].items():
            assert len(scrapes) >= (40 if "scrape_s" not in case else 30), (name, kind)
            for key in {k for sc in scrapes for k in sc}:
                base = re.sub(r"_(bucket|sum|count)$", "", key[: key.index("{")])
                assert base in registered or key[: key.index("{")] in registered, (name, key)

    def last(name: str, kind: str, key: str) -> float:
        return float(record["cases"][name]["scrapes"][kind][-1][key])

    def first(name: str, kind: str, key: str) -> float:
        return float(record["cases"][name]["scrapes"][kind][0][key])

    # the object store stopped under the job: the sink retried its lake commits, and committed
    # nothing in the last 10 scrapes (the alert's window)
    retries = 'pilake_stream_dependency_retries_total{operation="lake_commit"}'
    committed = "pilake_stream_episodes_committed_total{}"
    down = record["cases"]["store_down"]["scrapes"]["stream"]
    assert last("store_down", "stream", retries) > first("store_down", "stream", retries)
    assert down[-1][committed] == down[-11][committed]
    # healthy: committed and acknowledged, no retry
    assert last("healthy", "stream", committed) > 0
    assert last("healthy", "stream", retries) == 0
    acked = 'pilake_uploader_episodes_acked_total{status="committed"}'
    assert last("healthy", "uploader", acked) > 0
    # never acknowledged: the acked series is served, at 0, while the spool fills
    assert all(sc[acked] == 0 for sc in record["cases"]["uploader_never_acked"]["scrapes"]["uploader"])
    assert last("uploader_never_acked", "uploader", "pilake_uploader_spool_episodes{}") > 0
    # the broker down: sends failed, no chunk was sent
    failures = "pilake_uploader_send_failures_total{}"
    assert last("broker_down", "uploader", failures) > first("broker_down", "uploader", failures)
    chunks = "pilake_uploader_chunks_sent_total{}"
    assert last("broker_down", "uploader", chunks) == first("broker_down", "uploader", chunks)
    # the loaders: the healthy one's consumer waited under a tenth of the last 10 s, the starved
    # one's more than half (PilakeLoaderStarved's signal, a seconds counter: its rate)
    wait = "pilake_loader_wait_seconds_total{}"
    for name, low, high in (("loader_healthy", 0.0, 0.1), ("loader_starved", 0.5, 1.1)):
        scrapes = record["cases"][name]["scrapes"]["loader"]
        assert low <= (scrapes[-1][wait] - scrapes[-11][wait]) / 10 <= high, name
    # the store frozen (SIGSTOP) under a loader whose consumer keeps loader_healthy's pace: no
    # batch in the last 10 s, the consumer waiting all of them (the wait in progress counts)
    frozen = record["cases"]["loader_store_frozen"]["scrapes"]["loader"]
    batches = "pilake_loader_batches_total{}"
    assert frozen[-1][batches] == frozen[-11][batches]
    assert (frozen[-1][wait] - frozen[-11][wait]) / 10 > 0.9
    # pilake verify: clean (0 damaged places) until the byte flip, then the run that found it
    verify = [
        sc["pilake_verify_damaged_places{}"] for sc in record["cases"]["verify_damaged"]["scrapes"]["verify"]
    ]
    assert verify[0] == 0 and verify[-1] >= 1 and record["cases"]["verify_damaged"]["exit_codes"] == [0, 2]

    # Flink: the sink crash-looping restarted the job again and again; checkpoints failed and
    # none completed after the checkpoint directory became unwritable
    def flink(name: str, metric: str) -> list[float]:
        scrapes = record["cases"][name]["scrapes"]["flink"]
        return [next(v for k, v in sc.items() if k.startswith(metric + "{")) for sc in scrapes]

    restarts = flink("sink_crash_looping", "flink_jobmanager_job_numRestarts")
    assert restarts[-1] - restarts[-16] > 3
    failed = flink("checkpoints_failing", "flink_jobmanager_job_numberOfFailedCheckpoints")
    completed = flink("checkpoints_failing", "flink_jobmanager_job_numberOfCompletedCheckpoints")
    assert failed[-1] > failed[-16] and completed[-1] == completed[-21]
    # ... and its last completed checkpoint (a Unix time in ms, rebased by the render) is more
    # than 30 stretched minutes older than the last scrape (PilakeStreamCheckpointOld)
    case = record["cases"]["checkpoints_failing"]
    stamps = flink("checkpoints_failing", "flink_jobmanager_job_lastCheckpointCompletedTimestamp")
    assert (case["wall"][-1] - stamps[-1] / 1000) * 60 / case["scrape_s"] > 1800 + 300
    # the stream job SIGKILLed: its endpoint served, then nothing (PilakeStreamJobDown)
    down = record["cases"]["job_down"]["scrapes"]["stream"]
    assert "pilake_stream_subtask{}" in down[0] and not any(down[-30:])
    # a robot sending bad messages: more than 10 quarantine rows in the recording, good episodes
    # committed beside them
    bad = record["cases"]["quarantine_rising"]["scrapes"]["stream"][-1]
    assert sum(v for k, v in bad.items() if k.startswith("pilake_stream_episodes_quarantined_total{")) > 10
    assert bad[committed] > 0
    # the store down while robots keep sending: the lag passed 1,000 messages and kept growing
    lag = [
        sum(v for k, v in sc.items() if k.startswith("pilake_stream_consumer_lag_messages{"))
        for sc in record["cases"]["store_down_backlog"]["scrapes"]["stream"]
    ]
    assert lag[-16] > 1000 and lag[-1] > lag[-16]
    # the scrub ran 3 times, then never again: its last-run time stops moving (its figures stay)
    stopped = record["cases"]["verify_stopped"]
    runs = [sc["pilake_verify_last_run_timestamp_seconds{}"] for sc in stopped["scrapes"]["verify"]]
    assert len(set(runs)) == 3 and runs[-1] == runs[-40] and stopped["exit_codes"] == [0, 0, 0]
    # the store down for more than 5 minutes: the job restarted, then committed the backlog,
    # episodes more than 300 s late among them (PilakeFreshnessSlow)
    outage = record["cases"]["freshness_outage"]["scrapes"]["stream"]
    assert outage[0] and outage[-1]
    over = 'pilake_stream_freshness_seconds_bucket{le="+Inf"}'
    under = 'pilake_stream_freshness_seconds_bucket{le="300.0"}'
    assert outage[-1][over] - outage[-1][under] > 0
    assert outage[-1][committed] > outage[-11][committed]
    # unregistered robots: episodes kept coming in, every one quarantined, none committed
    refused = record["cases"]["all_refused"]["scrapes"]["stream"]
    unknown = 'pilake_stream_episodes_quarantined_total{reason="unknown_robot_type"}'
    arrived = "pilake_stream_episodes_in_total{}"
    assert refused[-1][arrived] - refused[-21][arrived] >= 15
    assert refused[-1][unknown] - refused[-21][unknown] == refused[-1][arrived] - refused[-21][arrived]
    assert refused[-1][committed] == refused[-21][committed]
    # the freshness buckets served are the code's, and the alert's threshold is one of them
    les = {
        re.search(r'le="([^"]+)"', k).group(1)  # type: ignore[union-attr]
        for k in record["cases"]["healthy"]["scrapes"]["stream"][-1]
        if k.startswith("pilake_stream_freshness_seconds_bucket")
    }
    assert les == {"+Inf", *(repr(float(b)) for b in FRESHNESS_BUCKETS)}


def test_freshness_buckets_cover_the_alert_threshold() -> None:
    """histogram_quantile never returns more than the top finite bound: the alert's threshold
    must be a bound with finite bounds above it (it was 300 s over a top bound of 128 s)."""
    from pi_jobs.stream._metrics import COMMIT_SECONDS, FRESHNESS_BUCKETS

    rule = next(r for r in _alerts() if r["alert"] == "PilakeFreshnessSlow")
    threshold = float(re.search(r"> (\d+(\.\d+)?)$", rule["expr"]).group(1))  # type: ignore[union-attr]
    assert threshold in FRESHNESS_BUCKETS and max(FRESHNESS_BUCKETS) > threshold
    assert max(COMMIT_SECONDS._upper_bounds[:-1]) >= 120  # a commit that waited out dependency_retry_s


def test_the_training_alert_cases_are_rendered_from_a_recorded_run() -> None:
    """train_alerts_test.yaml is what scripts/record_train_metrics.py --render makes of the
    committed record (no value typed by hand), whose series are the ones a run serves."""
    import importlib.util

    from pi_train._live_metrics import BUCKETS, LIVE_PARTS

    spec = importlib.util.spec_from_file_location(
        "record_train_metrics", ROOT / "scripts" / "record_train_metrics.py"
    )
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    record = json.loads(script.RECORD.read_text())
    assert TRAIN_ALERTS_TEST.read_text() == script.render(record)
    buckets = {"+Inf" if b == float("inf") else repr(float(b)) for b in BUCKETS}
    for name, case in record["cases"].items():
        series = case["series"]
        parts = {re.search(r'part="(\w+)"', s).group(1) for s in series if "part=" in s}  # type: ignore[union-attr]
        assert parts == set(LIVE_PARTS), name
        les = {re.search(r'le="([^"]+)"', s).group(1) for s in series if "_bucket{" in s}  # type: ignore[union-attr]
        assert les == buckets, name  # the buckets the code serves, none invented
        steps = series['pilake_train_steps_total{rank="0"}']
        assert steps == sorted(steps) and steps[-1] > 20, name  # a counter of a run that trained
    fractions = {name: case["data_wait_fraction"] for name, case in record["cases"].items()}
    assert fractions["input_bound"] > 0.2 > fractions["compute_bound"], fractions


def test_the_kafka_and_clickhouse_series_of_alerts_and_dashboard_are_served() -> None:
    """Kafka's: ones Strimzi's metrics reporter serves (the names its own dashboard reads,
    vendored with the pinned Strimzi) that kafka.yaml's allowList lets through. ClickHouse's: its
    endpoint exports system.events as ClickHouseProfileEvents_<event> and system.metrics as
    ClickHouseMetrics_<metric>; the names are checked against ClickHouse's own tables (chdb).
    Flink's are checked against a running Flink by tests/deploy/test_launcher_cluster.py."""
    import chdb

    exprs = [rule["expr"] for rule in _alerts()]
    exprs += [t["expr"] for p in json.loads(DASHBOARD.read_text())["panels"] for t in p.get("targets", [])]
    strimzi = json.loads(
        (ROOT / "tests" / "deploy" / "schemas" / f"strimzi-{_strimzi_version()}.json").read_text()
    )
    kafka = next(
        d
        for d in yaml.safe_load_all((ROOT / "deploy" / "k8s" / "kafka.yaml").read_text())
        if d["kind"] == "Kafka"
    )
    allow = kafka["spec"]["kafka"]["metricsConfig"]["values"]["allowList"]
    events = set(
        str(chdb.query("SELECT event FROM system.events SETTINGS system_events_show_zero_values = 1", "CSV"))
        .replace('"', "")
        .split()
    )
    metrics = set(str(chdb.query("SELECT metric FROM system.metrics", "CSV")).replace('"', "").split())
    kafka_used, clickhouse_used = set(), set()
    for expr in exprs:
        for name in re.findall(r"\bkafka_[a-z0-9_]+", expr):
            kafka_used.add(name)
            assert name in strimzi["metrics_reporter_series"], f"Strimzi's reporter serves no {name}"
            assert any(re.fullmatch(p, name) for p in allow), f"kafka.yaml's allowList drops {name}"
        for kind, name in re.findall(r"\bClickHouse(ProfileEvents|Metrics)_(\w+)", expr):
            clickhouse_used.add(name)
            assert name in (events if kind == "ProfileEvents" else metrics), (
                f"ClickHouse has no {kind} {name}"
            )
    assert kafka_used and clickhouse_used


def test_the_compose_scrape_config_passes_promtool_and_names_served_ports() -> None:
    assert "SUCCESS" in _promtool("check", "config", str(PROMETHEUS_DIR / "prometheus.yml"))
    config = yaml.safe_load((PROMETHEUS_DIR / "prometheus.yml").read_text())
    targets = {t for job in config["scrape_configs"] for s in job["static_configs"] for t in s["targets"]}
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    flink_port = {
        name: re.search(
            r"metrics.reporter.prom.port: (\d+)", services[name]["environment"]["FLINK_PROPERTIES"]
        )
        for name in ("jobmanager", "taskmanager")
    }
    for name, match in flink_port.items():
        assert match, f"compose {name} has no Prometheus reporter"
        assert f"{name}:{match.group(1)}" in targets
    from pi_jobs.settings import Settings

    slots = int(
        re.search(
            r"taskmanager.numberOfTaskSlots: (\d+)",
            services["taskmanager"]["environment"]["FLINK_PROPERTIES"],
        ).group(1)  # type: ignore[union-attr]
    )
    first = Settings(home=Path("/unused")).stream_metrics_port
    assert {f"taskmanager:{first + i}" for i in range(slots)} <= targets
    xml = (PROMETHEUS_DIR / "clickhouse.xml").read_text()
    port = re.search(r"<port>(\d+)</port>", xml)
    assert port and f"clickhouse:{port.group(1)}" in targets
    mounts = services["clickhouse"]["volumes"]
    assert any(m.startswith("../prometheus/clickhouse.xml:/etc/clickhouse-server/config.d/") for m in mounts)
    # the Kubernetes ConfigMap serves ClickHouse the same file
    k8s = [d for d in yaml.safe_load_all((ROOT / "deploy" / "k8s" / "clickhouse.yaml").read_text()) if d]
    config_map = next(
        d for d in k8s if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "clickhouse-config"
    )
    assert config_map["data"]["prometheus.xml"] == xml
    prometheus = services["prometheus"]
    assert any(v.startswith("../prometheus:/etc/prometheus") for v in prometheus["volumes"])
    assert tools_version_tag() in prometheus["image"]


def tools_version_tag() -> str:
    """The image tag of the Prometheus version the tests run (Debian's 2.42)."""
    return "v2.42."


def _wait_for(what: str, check: Callable[[], bool], timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"Prometheus never showed {what}"
        time.sleep(0.5)


@pytest.mark.integration
def test_prometheus_scrapes_the_uploader_the_stream_job_and_a_loader(
    broker: str, stack_settings: Any, tmp_path: Path
) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    from pi_ingest import _metrics as uploader_metrics
    from pi_ingest.uploader import Uploader, UploaderConfig
    from pi_jobs.stream import run_stream_job
    from pi_loader import Dataset, Loader, SampleSpec, ShardSpec
    from pi_loader.delivery import _metrics as loader_metrics

    from tests.fixtures.stream_jobs import small_stream_job
    from tests.jobs.test_stream_job import _episode

    run = uuid.uuid4().hex[:8]
    raw_topic, ack_topic = f"prom-raw-{run}", f"prom-ack-{run}"
    admin = AdminClient({"bootstrap.servers": broker})
    for future in admin.create_topics([NewTopic(raw_topic, 1, 1), NewTopic(ack_topic, 1, 1)]).values():
        future.result(timeout=10)
    # one endpoint per process for the uploader and the loader: an earlier test may have one up
    uploader_port = uploader_metrics.served_port() or _free_port()
    loader_port = loader_metrics.served_port() or _free_port()
    stream_first = _free_port()
    stream_ports = (stream_first, stream_first + 3)  # each worker takes the first free port
    jobs = [
        {"job_name": "uploader", "static_configs": [{"targets": [f"127.0.0.1:{uploader_port}"]}]},
        {"job_name": "stream", "static_configs": [{"targets": [
            f"127.0.0.1:{p}" for p in range(stream_ports[0], stream_ports[1] + 1)]}]},
        {"job_name": "loader", "static_configs": [{"targets": [f"127.0.0.1:{loader_port}"]}]},
    ]  # fmt: skip
    episodes = [_episode(i) for i in range(2)]
    with running_prometheus(tmp_path / "prometheus", jobs, rule_files=[ALERTS]) as prom:
        # the real rule file loads into the real server
        rules = {r["name"] for g in prom.get("/api/v1/rules")["groups"] for r in g["rules"]}
        assert rules == {rule["alert"] for rule in _alerts()}

        config = UploaderConfig(
            broker, tmp_path / "spool", raw_topic=raw_topic, ack_topic=ack_topic, metrics_port=uploader_port
        )
        with Uploader(config) as uploader:
            before = scrape(uploader_port)
            for episode in episodes:
                uploader.submit(episode)
            uploader.send_pending()
            job = small_stream_job(
                broker=broker,
                root=tmp_path,
                jar_dir=stack_settings.jar_dir,
                raw_topic=raw_topic,
                ack_topic=ack_topic,
                group_id=f"prom-{run}",
                metrics_ports=stream_ports,
            )
            # idle 8 s after the last commit: the worker's endpoint is scraped (every 1 s) meanwhile
            report = run_stream_job(job, until_idle=True, idle_timeout_s=8.0, max_runtime_s=300)
            uploader.run_until_confirmed(timeout_s=60.0)
            uploaded = scrape(uploader_port)
        assert report.episodes_committed == 2

        dataset = Dataset(job.lake_root, spec=SampleSpec(action_horizon=4), seed=1)
        with Loader(
            dataset, batch_size=8, num_workers=1, shard=ShardSpec(0, 1), metrics_port=loader_port
        ) as loader:
            assert loader_metrics.served_port() == loader_port
            loader_before = scrape(loader_port)
            samples = sum(len(batch["step"]) for batch in loader)
            loaded = scrape(loader_port)
        assert samples == len(dataset) == sum(e.step_count for e in episodes)

        def stream_committed(p: Prometheus = prom) -> bool:
            return p.value("sum(max_over_time(pilake_stream_episodes_committed_total[10m]))") == 2

        def uploader_seen(p: Prometheus = prom) -> bool:
            got = p.value('sum(pilake_uploader_episodes_acked_total{job="uploader",status="committed"})')
            return got == uploaded[("pilake_uploader_episodes_acked_total", (("status", "committed"),))]

        def loader_seen(p: Prometheus = prom) -> bool:
            return (
                p.value('pilake_loader_samples_total{job="loader"}')
                == loaded[("pilake_loader_samples_total", ())]
            )

        # the stream job's figure was scraped while it ran (its worker is gone now)
        _wait_for("the stream job's committed episodes", stream_committed, timeout_s=10)
        _wait_for("the uploader's acknowledgements", uploader_seen)
        _wait_for("the loader's samples", loader_seen)
        # and the figures are what each did (the counters are per process: take this test's share)
        acked = ("pilake_uploader_episodes_acked_total", (("status", "committed"),))
        assert uploaded[acked] - before.get(acked, 0.0) == 2
        samples_key = ("pilake_loader_samples_total", ())
        assert loaded[samples_key] - loader_before.get(samples_key, 0.0) == samples
        assert (prom.value('count(max_over_time(up{job="stream"}[10m]) == 1)') or 0) >= 1
        in_total = prom.value("sum(max_over_time(pilake_stream_episodes_in_total[10m]))")
        assert in_total == 2


def test_the_k8s_prometheus_rule_is_alerts_yaml_and_the_monitors_are_selected() -> None:
    """deploy/k8s/prometheus-rule.yaml is what scripts/render_prometheus_rule.py renders (the
    groups of alerts.yaml), kustomize includes it, and it and every PodMonitor carry the label a
    default kube-prometheus-stack selects (release: kube-prometheus-stack)."""
    from tests.deploy._kustomize import render as kustomize

    script = _script("render_prometheus_rule")
    assert script.OUT.read_text() == script.render()
    objects = kustomize(ROOT / "deploy" / "k8s", files={"secrets.env": "A=b\n"})
    rule = next(o for o in objects if o["kind"] == "PrometheusRule")
    assert rule["spec"]["groups"] == yaml.safe_load(ALERTS.read_text())["groups"]
    selected = [o for o in objects if o["kind"] in ("PrometheusRule", "PodMonitor")]
    assert len(selected) >= 5
    for obj in selected:
        assert obj["metadata"].get("labels", {}).get("release") == "kube-prometheus-stack", obj["metadata"]
