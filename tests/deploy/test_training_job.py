"""deploy/k8s/training.yaml: the training Job's parts agree with each other and with the code, and
its trainer script runs with the real `pilake train`: a SIGTERM to the script (the container's
PID 1, as the kubelet sends it) checkpoints and exits 75, which the Job's podFailurePolicy
ignores; the same script started again resumes and exits 0 at the last step.

Schema validation is tests/deploy/test_k8s_schemas.py's (every rendered object); no cluster runs
here, so the rendezvous over the headless Service's DNS is not exercised (the multi-host run is
tested on one machine by tests/train/test_multihost.py)."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from pi_jobs.cli import build_parser
from pi_jobs.cli._train import train_config_from_args
from pi_jobs.settings import Settings
from pi_train._live_metrics import metrics_port_of

from tests.conftest import _free_port
from tests.deploy._kustomize import render
from tests.fixtures.lake_factory import FakeLake, write_lake

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
VENV_BIN = Path(sys.executable).parent  # where this interpreter's `pilake` entry point is


@pytest.fixture(scope="module")
def train_lake(tmp_path_factory: pytest.TempPathFactory) -> FakeLake:
    # tests/train's lake: 4 episodes of 12 steps, two 32x32 cameras
    root = tmp_path_factory.mktemp("train_job_lake")
    return write_lake(
        root, episodes=4, steps=12, cameras=("front", "wrist"), size=(32, 32), garbage_attempt=False
    )


def _objects() -> list[dict[str, Any]]:
    return render(K8S, files={"secrets.env": (K8S / "secrets.env.example").read_text()})


def _get(kind: str, name: str) -> dict[str, Any]:
    (found,) = [o for o in _objects() if o["kind"] == kind and o["metadata"]["name"] == name]
    return found


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container["env"] if "value" in e}


def _pod() -> dict[str, Any]:
    spec: dict[str, Any] = _get("Job", "pilake-train")["spec"]["template"]["spec"]
    return spec


def _trainer() -> dict[str, Any]:
    (trainer,) = _pod()["containers"]
    return trainer


def test_the_job_the_service_and_the_monitor_fit_together() -> None:
    job = _get("Job", "pilake-train")
    service = _get("Service", "pilake-train")
    pod, trainer = _pod(), _trainer()
    env = _env(trainer)
    labels = job["spec"]["template"]["metadata"]["labels"]
    # one pod per host, addressed as <job>-<index>.<service>: host 0 is the rendezvous
    assert job["spec"]["completionMode"] == "Indexed"
    assert job["spec"]["completions"] == job["spec"]["parallelism"] == int(env["NNODES"]) >= 2
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"]
    assert service["spec"]["selector"].items() <= labels.items()
    assert pod["subdomain"] == service["metadata"]["name"]
    assert env["MASTER_ADDR"] == f"{job['metadata']['name']}-0.{service['metadata']['name']}"
    (rendezvous,) = service["spec"]["ports"]
    ports = {p["name"]: p["containerPort"] for p in trainer["ports"]}
    assert rendezvous["port"] == rendezvous["targetPort"] == ports["rendezvous"] == int(env["MASTER_PORT"])
    # one process per GPU, each serving its metrics on the port the PodMonitor scrapes
    gpus = trainer["resources"]["limits"]["nvidia.com/gpu"]
    assert trainer["resources"]["requests"]["nvidia.com/gpu"] == gpus == int(env["NPROC"])
    script = trainer["args"][0]
    first = int(shlex.split(script.split("--metrics-port", 1)[1])[0])
    lo, hi = (int(p) for p in env["PILAKE_LOADER_METRICS_PORT"].split("-"))
    assert {n: p for n, p in ports.items() if n.startswith("train-")} == {
        f"train-{r}": first + r for r in range(gpus)
    }
    assert {n: p for n, p in ports.items() if n.startswith("loader-")} == {
        f"loader-{i}": lo + i for i in range(hi - lo + 1)
    } and hi - lo + 1 >= gpus
    monitor = _get("PodMonitor", "pilake-train")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= labels.items()
    scraped = {e["port"] for e in monitor["spec"]["podMetricsEndpoints"]}
    assert scraped == {n for n in ports if n.startswith(("train-", "loader-"))}


def test_the_pod_is_non_root_bounded_and_checkpoints_within_its_grace() -> None:
    pod, trainer = _pod(), _trainer()
    security = pod["securityContext"]
    assert security["runAsNonRoot"] is True and security["runAsUser"] > 0 and security["fsGroup"] > 0
    for container in (*pod["initContainers"], trainer):
        assert container["securityContext"]["allowPrivilegeEscalation"] is False
        assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
        assert container["resources"]["limits"]["memory"] and container["resources"]["requests"]["cpu"]
    # signal to exit measured at 0.5-2.1 s for the reference model (docs/training-preemption.md)
    assert pod["terminationGracePeriodSeconds"] >= 60
    assert pod["restartPolicy"] == "Never"
    rules = _get("Job", "pilake-train")["spec"]["podFailurePolicy"]["rules"]
    assert {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]} in rules
    assert {
        "action": "Ignore",
        "onExitCodes": {"containerName": trainer["name"], "operator": "In", "values": [75]},
    } in rules


def test_the_stage_step_reads_what_the_trainer_trains_on_through_the_nvme_cache(tmp_path: Path) -> None:
    pod, trainer = _pod(), _trainer()
    (stage,) = pod["initContainers"]
    assert stage["env"] == trainer["env"] and stage["envFrom"] == trainer["envFrom"]
    assert stage["image"] == trainer["image"] and "nvidia.com/gpu" not in stage["resources"]["limits"]
    assert '--nproc "$NPROC"' in stage["args"][0]  # staging uses the workers of all processes
    assert (
        "--stage" in stage["args"][0]
        and "$TRAIN_ARGS" in stage["args"][0]
        and "$TRAIN_ARGS" in trainer["args"][0]
    )
    env = _env(trainer)
    # the arguments parse with the real CLI into a valid TrainConfig under the cluster's settings
    toml = _get("ConfigMap", "pilake-config")["data"]["pilake.toml"]
    (tmp_path / "pilake.toml").write_text(toml)
    settings = Settings.from_env(
        {"PILAKE_CONFIG": str(tmp_path / "pilake.toml"), "PILAKE_HOME": str(tmp_path)}
    )
    argv = ["train", *shlex.split(env["TRAIN_ARGS"]), "--steps", env["STEPS"], "--metrics-port", "9490"]
    config = train_config_from_args(settings, build_parser().parse_args(argv))
    assert config.lake.startswith("s3://") and config.dataset and config.device == "cuda"
    # the cache is the node-local volume, large enough for --cache-gib
    mounts = {m["name"]: m["mountPath"] for m in trainer["volumeMounts"]}
    assert mounts["cache"] == config.cache_dir
    volumes = {v["name"]: v for v in pod["volumes"]}
    size = volumes["cache"]["emptyDir"]["sizeLimit"]
    assert size.endswith("Gi") and int(size[:-2]) >= config.cache_gib
    assert pod["nodeSelector"]["pilake.io/local-nvme"] == "true"
    assert volumes["runs"]["persistentVolumeClaim"]["claimName"] == "pilake-train-runs"
    assert _get("PersistentVolumeClaim", "pilake-train-runs")["spec"]["accessModes"] == ["ReadWriteMany"]
    assert metrics_port_of(config, _group(local_rank=7), {}) == 9497


def _group(local_rank: int) -> Any:
    from pi_train import ProcessGroup

    return ProcessGroup(rank=local_rank, world_size=8, local_world_size=8)


def _run_script(env: dict[str, str], runs: Path, port: int) -> subprocess.Popen[str]:
    script = (
        _trainer()["args"][0]
        .replace('"/runs/', f'"{runs}/')
        .replace("--metrics-port 9490", f"--metrics-port {port}")
    )
    return subprocess.Popen(
        ["/bin/sh", "-c", script],
        env=env,
        cwd=ROOT,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def test_the_trainer_script_exits_75_on_sigterm_and_resumes_to_0(
    train_lake: FakeLake, tmp_path: Path
) -> None:
    runs = tmp_path / "runs"
    args = f"--lake {train_lake.layout.root} --batch-size 4 --action-horizon 4 --workers 0 --device cpu"
    args += " --checkpoint-every 1000 --log-every 1000"
    env = dict(
        os.environ,
        PATH=f"{VENV_BIN}:{os.environ['PATH']}",
        OPENBLAS_NUM_THREADS="1",
        PILAKE_HOME=str(tmp_path / "home"),
        RUN_NAME="run1",
        STEPS="100000",
        TRAIN_ARGS=args,
        NNODES="1",
        NPROC="1",
        JOB_COMPLETION_INDEX="0",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(_free_port()),
    )
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "PILAKE_CONFIG"):
        env.pop(key, None)
    host_out = runs / "run1" / "host-0"  # this host's logs; checkpoints in runs/run1/checkpoints
    steps_log = host_out / "steps.rank0.jsonl"
    proc = _run_script(env, runs, _free_port())
    deadline = time.monotonic() + 300
    while not (steps_log.exists() and steps_log.read_text().count("\n") >= 2):
        assert proc.poll() is None, proc.communicate()[0][-3000:]
        assert time.monotonic() < deadline, "no training step within 300 s"
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)  # to sh, PID 1 of the container
    try:
        out = proc.communicate(timeout=120)[0]
    finally:
        subprocess.run(["pkill", "-TERM", "-P", str(proc.pid)], check=False)  # its pilake train, if left
    assert proc.returncode == 75, out[-3000:]
    assert "stopped by SIGTERM" in out, out[-3000:]
    stopped = json.loads((host_out / "final.rank0.json").read_text())["step"]
    assert (runs / "run1" / "checkpoints").is_dir()
    assert 2 <= stopped < 100000
    # the Job starts the index again: the same script resumes from the checkpoint to the end
    proc = _run_script(dict(env, STEPS=str(stopped + 2)), runs, _free_port())
    out = proc.communicate(timeout=300)[0]
    assert proc.returncode == 0, out[-3000:]
    assert json.loads((host_out / "final.rank0.json").read_text())["step"] == stopped + 2
    records = [json.loads(line) for line in steps_log.read_text().splitlines()]
    assert [r["step"] for r in records] == list(range(1, stopped + 3))
