"""A real Prometheus (Debian's 2.42, tests/fixtures/prometheus.py) scrapes a training run while it
trains, with deploy/prometheus/alerts.yaml loaded: it stores the trainer's series, and the
training alert's expression, evaluated by the server on what it scraped, is the data-wait share
the run's own endpoint shows."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml
from pi_train import TrainConfig, train

from tests.conftest import _free_port
from tests.fixtures.lake_factory import FakeLake
from tests.fixtures.metrics_scrape import Samples, scrape
from tests.fixtures.prometheus import Prometheus, running_prometheus

ALERTS = Path(__file__).resolve().parents[2] / "deploy" / "prometheus" / "alerts.yaml"
STEPS = 24


@pytest.mark.integration
def test_prometheus_scrapes_a_training_run_and_evaluates_the_alert_on_it(
    train_lake: FakeLake, tmp_path: Path
) -> None:
    port = _free_port()
    jobs = [{"job_name": "pilake-train", "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}]
    last: dict[str, Samples] = {}
    with running_prometheus(tmp_path / "prometheus", jobs, rule_files=[ALERTS]) as prom:
        rules = {r["name"] for g in prom.get("/api/v1/rules")["groups"] for r in g["rules"]}
        assert "PilakeTrainInputBound" in rules

        def steps_seen(p: Prometheus = prom) -> float:
            return p.value('max(pilake_train_steps_total{job="pilake-train", rank="0"})') or 0.0

        def on_step(step: int, loss: float) -> None:
            if step in (2, STEPS):  # hold the step until Prometheus has scraped it
                deadline = time.monotonic() + 30
                while steps_seen() < step:
                    assert time.monotonic() < deadline, f"Prometheus never scraped step {step}"
                    time.sleep(0.2)
            if step == STEPS:
                last["samples"] = scrape(port)

        config = TrainConfig(
            lake=train_lake.layout.root,
            framework="torch",
            steps=STEPS,
            batch_size=4,
            action_horizon=4,
            workers=0,
            out_dir=str(tmp_path / "run"),
            checkpoint_every=0,
            device="cpu",
            threads=1,
            plot=False,
            metrics_port=port,
        )
        assert train(config, on_step=on_step).step == STEPS
        samples = last["samples"]
        key = "pilake_train_step_seconds_sum"
        mine = {part: samples[(key, (("part", part), ("rank", "0")))] for part in ("data_wait", "total")}
        stored = {
            part: prom.value(f'max_over_time({key}{{job="pilake-train",part="{part}"}}[10m])')
            for part in ("data_wait", "total")
        }
        assert stored == pytest.approx(mine, rel=1e-9)  # the server holds what the run served
        # the alert's expression, threshold left out: its vector matching fits the served labels
        groups = yaml.safe_load(ALERTS.read_text())["groups"]
        (alert,) = [r for g in groups for r in g["rules"] if r["alert"] == "PilakeTrainInputBound"]
        expr = alert["expr"].rsplit(">", 1)[0]
        (series,) = prom.query(expr)
        assert series["metric"] == {"job": "pilake-train", "instance": f"127.0.0.1:{port}", "rank": "0"}
        assert 0 < float(series["value"][1]) < 1
        share = prom.value(f'{key}{{part="data_wait"}} / ignoring (part) {key}{{part="total"}}')
        assert share == pytest.approx(mine["data_wait"] / mine["total"], rel=1e-9)
