"""deploy/k8s/verify.yaml: the nightly scrub runs `pilake verify` with flags the CLI accepts,
read-only (no repair), with the stream job's image, settings and credentials."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tests.deploy import _policy
from tests.deploy._kustomize import render
from tests.deploy.test_manifests import _one

K8S = Path(__file__).resolve().parents[2] / "deploy" / "k8s"


def test_the_verify_cronjob_scrubs_a_rotating_sample_with_the_job_settings() -> None:
    cron = _one("CronJob", "pilake-verify")
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"
    job = cron["spec"]["jobTemplate"]["spec"]
    assert job["backoffLimit"] == 0  # a damaged lake stays damaged: the failure is the signal
    pod = job["template"]["spec"]
    (container,) = pod["containers"]
    script = " ".join(container["args"])
    assert "pilake verify" in script and "repair" not in script
    words = shlex.split(script.replace('"$(date +%j)"', "123"))
    args = words[words.index("verify") :]
    from pi_jobs.cli import build_parser

    parsed = build_parser().parse_args(args)  # the CLI has this command and these flags
    assert 0 < parsed.sample < 1 and parsed.seed == 123 and parsed.state and parsed.report
    flink = _one("FlinkDeployment")
    assert container["image"] == flink["spec"]["image"]
    assert container["envFrom"] == flink["spec"]["podTemplate"]["spec"]["containers"][0]["envFrom"]
    mounted = {m["name"] for m in container["volumeMounts"]}
    assert {"pilake-config", "verify-state"} <= mounted


# ---- where the run's figures go (issue 32: PilakeVerifyFoundDamage must be able to fire) --------


def _rendered() -> list[dict[str, Any]]:
    return render(K8S, files={"secrets.env": (K8S / "secrets.env.example").read_text()})


def _pushgateway_url(objects: list[dict[str, Any]]) -> str:
    """The --pushgateway the verify CronJob passes, its shell variable resolved from its env."""
    cron = next(o for o in objects if o["kind"] == "CronJob" and o["metadata"]["name"] == "pilake-verify")
    (container,) = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]

    def config_map(name: str) -> dict[str, str]:
        (found,) = [o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == name]
        return dict(found["data"])

    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        env.update(config_map(source["configMapRef"]["name"]))
    for e in container.get("env", []):
        ref = e.get("valueFrom", {}).get("configMapKeyRef")
        if "value" in e or ref:
            env[e["name"]] = e["value"] if "value" in e else config_map(ref["name"])[ref["key"]]
    script = " ".join(container["args"]).replace('"$(date +%j)"', "123")
    script = re.sub(r"\$\{?(\w+)\}?", lambda m: env[m[1]], script)  # an unset variable: KeyError
    words = shlex.split(script)
    from pi_jobs.cli import build_parser

    parsed = build_parser().parse_args(words[words.index("verify") :])
    assert parsed.pushgateway, "the verify CronJob pushes no metrics: PilakeVerifyFoundDamage cannot fire"
    return str(parsed.pushgateway)


def _pushgateway_pods(objects: list[dict[str, Any]], url: str) -> tuple[dict[str, str], int]:
    """(pod labels, container port) behind the Service `url` names, as a cluster would resolve it."""
    parts = urlsplit(url)
    assert parts.scheme == "http" and parts.hostname and parts.port, url
    services = [o for o in objects if o["kind"] == "Service" and o["metadata"]["name"] == parts.hostname]
    assert len(services) == 1, f"--pushgateway {url} names no Service of the manifests"
    (service,) = services
    (svc_port,) = [p for p in service["spec"]["ports"] if p["port"] == parts.port]
    selector = service["spec"]["selector"]
    (deployment,) = [
        o
        for o in objects
        if o["kind"] == "Deployment"
        and selector.items() <= o["spec"]["template"]["metadata"]["labels"].items()
    ]
    template = deployment["spec"]["template"]
    ports = {
        p["name"]: p["containerPort"] for c in template["spec"]["containers"] for p in c.get("ports", [])
    }
    target = svc_port.get("targetPort", svc_port["port"])
    return template["metadata"]["labels"], ports[target] if isinstance(target, str) else target


def test_verify_pushes_to_a_pushgateway_service_that_exists() -> None:
    objects = _rendered()
    url = _pushgateway_url(objects)
    labels, port = _pushgateway_pods(objects, url)
    assert port == 9091
    (deployment,) = [
        o
        for o in objects
        if o["kind"] == "Deployment" and o["spec"]["template"]["metadata"]["labels"] == labels
    ]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"].startswith("prom/pushgateway:v")
    # the pushed groups survive a restart on a claim (else a restart would forget the damage)
    args = " ".join(container["args"])
    assert "--persistence.file=/data/" in args
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == "/data"]
    assert "persistentVolumeClaim" in volumes[mount["name"]]
    # Prometheus scrapes it, keeping the pushed job label, with the label kube-prometheus-stack selects
    (monitor,) = [
        o
        for o in objects
        if o["kind"] == "PodMonitor" and o["spec"]["selector"]["matchLabels"].items() <= labels.items()
    ]
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    assert endpoint["honorLabels"] is True and endpoint["port"] == "http"
    assert {p["name"] for p in container["ports"]} >= {endpoint["port"]}


def test_network_policies_let_verify_push_and_prometheus_scrape_and_nobody_else() -> None:
    objects = _rendered()
    labels, port = _pushgateway_pods(objects, _pushgateway_url(objects))
    cron = next(o for o in objects if o["kind"] == "CronJob" and o["metadata"]["name"] == "pilake-verify")
    verify = cron["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["labels"]
    push = _policy.Flow("verify pushes", "pilake", verify, labels, port)
    scrape = _policy.Flow("Prometheus scrapes", "monitoring", {}, labels, port)
    assert _policy.allowed(objects, push) and _policy.allowed(objects, scrape)
    for stranger in (
        _policy.Flow("the stream job", "pilake", {"app": "pilake-stream"}, labels, port),
        _policy.Flow("maintenance", "pilake", {"app": "pilake-maintenance"}, labels, port),
        _policy.Flow("another namespace", "default", {"app": "pilake-verify"}, labels, port),
    ):
        assert not _policy.allowed(objects, stranger), stranger.why
    # the check can fail: without the Pushgateway's policy the default deny refuses the push
    without = [
        o
        for o in objects
        if not (o["kind"] == "NetworkPolicy" and o["metadata"]["name"] == "pilake-pushgateway")
    ]
    assert not _policy.allowed(without, push)
