"""The job image's entry (deploy/job/launch_stream_job.py) on a real Flink session cluster.

What the Flink operator's PythonDriver does in the JobManager, done here with Flink's own
`flink run -py` against a standalone session cluster from the apache-flink wheel: the launcher
reads a settings file only (PILAKE_CONFIG) and submits the stream job; one uploaded episode is
committed, and checkpoints go to the settings' `flink.checkpoint_dir`.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import _free_port
from tests.fixtures.metrics_scrape import scrape

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
LAUNCHER = DEPLOY / "job" / "launch_stream_job.py"


def _rest(url: str, *, method: str = "GET") -> Any:
    request = urllib.request.Request(url, method=method)
    with urllib.request.urlopen(request, timeout=10) as response:
        body = response.read()
    return json.loads(body) if body else None


def _poll(what: str, timeout_s: float, check: Any) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout_s:.0f} s")
        time.sleep(1.0)


@pytest.mark.integration
def test_launcher_submits_the_stream_job_from_a_settings_file(
    broker: str, stack_settings: Any, tmp_path: Path
) -> None:
    from pi_ingest.simulator import SimulationConfig, write_fleet
    from pi_ingest.uploader import UploaderConfig, upload_paths
    from pi_jobs.local.flink_cluster import LocalClusterConfig, start_local_cluster, stop_local_cluster
    from pi_jobs.local.flink_submit import flink_home
    from pi_jobs.settings import Settings
    from pi_jobs.stream.connector_jars import ensure_connector_jars

    home = tmp_path / "home"
    for jar in ensure_connector_jars(stack_settings.jar_dir):  # the session's, not a new download
        (home / "jars").mkdir(parents=True, exist_ok=True)
        shutil.copy(jar, home / "jars" / jar.name)
    rest_port = _free_port()
    checkpoints = (tmp_path / "checkpoints-from-settings").as_uri()
    config = tmp_path / "pilake.toml"
    config.write_text(
        f'[kafka]\nbootstrap_servers = "{broker}"\n\n[stream]\nparallelism = 1\n\n'
        f'[flink]\nrest_url = "http://127.0.0.1:{rest_port}"\ncheckpoint_dir = "{checkpoints}"\n\n'
        "[metrics]\nuploader_port = 0\nstream_port = 0\nloader_port = 0\n"
    )
    env = {**os.environ, "PILAKE_HOME": str(home), "PILAKE_CONFIG": str(config)}
    for name in [n for n in env if n.startswith("PILAKE_") and n not in ("PILAKE_HOME", "PILAKE_CONFIG")]:
        del env[name]  # the settings file alone configures the job
    settings = Settings.from_env(env)
    base = f"http://127.0.0.1:{rest_port}"
    # Flink's Prometheus reporter as the FlinkDeployment configures it (one port per pod there;
    # here the JobManager and the TaskManager share a host, so a range of two)
    reporter_port = _free_port()
    documents = yaml.safe_load_all((DEPLOY / "k8s" / "flink-deployment.yaml").read_text())
    deployment = next(d for d in documents if d and d.get("kind") == "FlinkDeployment")  # beside its PDB
    reporter = {
        k: str(v) for k, v in deployment["spec"]["flinkConfiguration"].items() if k.startswith("metrics.")
    }
    assert reporter, "the FlinkDeployment configures no metrics reporter"
    reporter["metrics.reporter.prom.port"] = f"{reporter_port}-{reporter_port + 1}"
    start_local_cluster(settings, LocalClusterConfig(slots=1, extra=tuple(sorted(reporter.items()))))
    job_id = ""
    try:
        cmd = [
            str(flink_home() / "bin" / "flink"), "run", "-m", f"127.0.0.1:{rest_port}", "-d",
            "-py", str(LAUNCHER), "-pyexec", sys.executable, "-pyclientexec", sys.executable,
        ]  # fmt: skip
        proc = subprocess.run(
            cmd, env={**env, "FLINK_LOG_DIR": str(tmp_path / "client-log")}, capture_output=True,
            text=True, timeout=400, check=False, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        out = proc.stdout + proc.stderr
        found = re.search(r"JobID ([0-9a-f]{32})", out)
        assert proc.returncode == 0 and found, f"flink run exited {proc.returncode}:\n{out[-3000:]}"
        job_id = found.group(1)
        assert f"lake_root='{home / 'lake'}'" in out  # the launcher's config came from the file
        _poll("job RUNNING", 300, lambda: _rest(f"{base}/jobs/{job_id}")["state"] == "RUNNING")

        bundles = write_fleet(
            SimulationConfig(robots=1, episodes_per_robot=1, duration_s=2.0, seed=14),
            tmp_path / "b",
            progress=False,
        )
        report = upload_paths(bundles, UploaderConfig(broker, tmp_path / "spool"), wait_s=300, progress=False)
        assert len(report.committed) == 1 and not report.pending, report

        def latest_checkpoint() -> str:
            doc = _rest(f"{base}/jobs/{job_id}/checkpoints")
            return str(((doc.get("latest") or {}).get("completed") or {}).get("external_path") or "")

        path = _poll("a completed checkpoint", 120, latest_checkpoint)
        assert path.startswith(checkpoints.replace("file:///", "file:/")), path

        # the reporter serves the Flink series the alert rules and the dashboard use, for this job
        served = {name for port in (reporter_port, reporter_port + 1) for name, _ in scrape(port)}
        rules = (DEPLOY / "prometheus" / "alerts.yaml").read_text()
        dashboard = (DEPLOY / "grafana" / "pilake.json").read_text()
        used = set(re.findall(r"\bflink_[A-Za-z0-9_]+", rules + dashboard))
        assert used and used <= served, (
            f"alert rules or dashboard name Flink series the reporter does not serve: {used - served}"
        )
        restarts = {  # job_id -> job_name (the label PilakeStreamRestarting's message names)
            dict(labels).get("job_id"): dict(labels).get("job_name")
            for port in (reporter_port, reporter_port + 1)
            for (name, labels) in scrape(port)
            if name == "flink_jobmanager_job_numRestarts"
        }
        assert restarts.get(job_id), restarts
        assert any(n.startswith("flink_taskmanager_") for n in served)
    finally:
        if job_id:
            # the job may have ended already; stopping the cluster ends it anyway
            with contextlib.suppress(OSError):
                _rest(f"{base}/jobs/{job_id}?mode=cancel", method="PATCH")
        stop_local_cluster(settings)
