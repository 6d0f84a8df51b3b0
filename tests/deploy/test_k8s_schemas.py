"""deploy/k8s as the pinned operators would take it: the kustomization rendered, every object
validated against the Kubernetes API schema and every custom resource against its operator's CRD
schema, at the versions of deploy/versions.toml (schemas vendored in tests/deploy/schemas/ by
scripts/vendor_deploy_schemas.py); the Kafka version one the pinned Strimzi runs; no committed
secret value; a restart policy that outlasts a dependency's outage; metrics wired to Prometheus.

Validation is strict, as `kubectl apply` with server-side field validation is: an object schema
that lists its properties takes no others (unless it preserves unknown fields). Not checked: the
CRDs' CEL rules (x-kubernetes-validations) and string formats.
"""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
import tomllib
import xml.etree.ElementTree as ET
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from pi_jobs.settings import Settings

from tests.deploy._kustomize import KustomizeError, render

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
SCHEMAS = Path(__file__).parent / "schemas"
VERSIONS = tomllib.loads((ROOT / "deploy" / "versions.toml").read_text())
EXAMPLE_ENV = (K8S / "secrets.env.example").read_text()


def _rendered() -> list[dict[str, Any]]:
    return render(K8S, files={"secrets.env": EXAMPLE_ENV})


def _one(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


# ---- the schemas -------------------------------------------------------------------------------


def _schema_file(component: str) -> dict[str, Any]:
    path = SCHEMAS / f"{component}-{VERSIONS[component]['version']}.json"
    assert path.exists(), f"{path.name} is not vendored: run scripts/vendor_deploy_schemas.py"
    doc: dict[str, Any] = json.loads(path.read_text())
    return doc


def _strict(node: Any) -> Any:
    """An OpenAPI schema as JSON Schema (draft 4), closed where it lists its properties."""
    if isinstance(node, list):
        return [_strict(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: _strict(v) for k, v in node.items()}
    if out.pop("x-kubernetes-int-or-string", False):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if out.pop("nullable", False) and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    preserve = out.get("x-kubernetes-preserve-unknown-fields", False)
    if "properties" in out and "additionalProperties" not in out and not preserve:
        out["additionalProperties"] = False
    return out


@cache
def _kubernetes() -> tuple[dict[str, str], dict[str, Any]]:
    doc = _schema_file("kubernetes")
    definitions = _strict(doc["definitions"])
    # YAML writes these as numbers as often as strings; the API server takes both
    definitions["io.k8s.apimachinery.pkg.util.intstr.IntOrString"] = {"type": ["integer", "string"]}
    definitions["io.k8s.apimachinery.pkg.api.resource.Quantity"] = {"type": ["number", "string"]}
    return doc["kinds"], definitions


@cache
def _custom_kinds() -> dict[str, dict[str, Any]]:
    kinds: dict[str, dict[str, Any]] = {}
    for component in ("strimzi", "flink-kubernetes-operator", "prometheus-operator"):
        for key, entry in _schema_file(component)["kinds"].items():
            schema = json.loads(json.dumps(entry["schema"]))
            # every object has these at its root, whether its CRD lists them or not
            for field, typ in (("apiVersion", "string"), ("kind", "string"), ("metadata", "object")):
                schema["properties"].setdefault(field, {"type": typ})
            kinds[key] = {"component": component, "scope": entry["scope"], "schema": _strict(schema)}
    return kinds


def _validate_k8s(definition: str, obj: Any) -> list[str]:
    _, definitions = _kubernetes()
    schema = {"definitions": definitions, "$ref": f"#/definitions/{definition}"}
    return [
        f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
        for e in jsonschema.Draft4Validator(schema).iter_errors(obj)
    ]


def schema_errors(obj: dict[str, Any]) -> list[str]:
    """What the pinned API server or operator would refuse in `obj` (empty when valid)."""
    api_version, kind = obj.get("apiVersion", ""), obj.get("kind", "")
    builtin, _ = _kubernetes()
    key = f"{api_version}/{kind}"
    if key in builtin:
        return _validate_k8s(builtin[key], obj)
    custom = _custom_kinds().get(key)
    if custom is None:
        return [f"no schema for {key}: not a pinned Kubernetes kind nor a pinned operator's CRD"]
    errors = [
        f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
        for e in jsonschema.Draft4Validator(custom["schema"]).iter_errors(obj)
    ]
    # a custom resource's metadata is the API server's ObjectMeta
    errors += [f"metadata/{e}" for e in _validate_k8s(builtin["ObjectMeta"], obj.get("metadata", {}))]
    if custom["scope"] == "Namespaced" and not obj["metadata"].get("namespace"):
        errors.append("metadata: a namespaced custom resource without a namespace")
    return errors


def _names_errors(obj: dict[str, Any]) -> list[str]:
    """Name rules the schemas do not carry: object names (DNS subdomain), port names (IANA)."""
    errors = []
    name = obj["metadata"]["name"]
    if not re.fullmatch(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?", name):
        errors.append(f"metadata.name {name!r} is not a DNS subdomain")
    for node in _walk(obj):
        if isinstance(node, dict) and "containerPort" in node and "name" in node:
            port = node["name"]
            if not (len(port) <= 15 and re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", port)):
                errors.append(f"port name {port!r} is not an IANA service name (<= 15 characters)")
    return errors


def _walk(node: Any) -> Any:
    yield node
    if isinstance(node, dict):
        for value in node.values():
            yield from _walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from _walk(value)


def test_every_rendered_object_is_valid_for_the_pinned_kubernetes_and_operators() -> None:
    objects = _rendered()
    problems = {f"{o['kind']}/{o['metadata']['name']}": schema_errors(o) + _names_errors(o) for o in objects}
    problems = {k: v for k, v in problems.items() if v}
    assert not problems, json.dumps(problems, indent=1)[:4000]
    checked = {_custom_kinds()[f"{o['apiVersion']}/{o['kind']}"]["component"] for o in objects
               if f"{o['apiVersion']}/{o['kind']}" in _custom_kinds()}  # fmt: skip
    assert checked == {"strimzi", "flink-kubernetes-operator", "prometheus-operator"}, checked
    assert {o["kind"] for o in objects} >= {"StatefulSet", "CronJob", "Secret", "Kafka", "FlinkDeployment"}


@pytest.mark.parametrize(
    ("kind", "path", "value", "expected"),
    [
        ("Kafka", ["spec", "kafka", "listners"], [], "Additional properties"),  # a typo
        ("KafkaTopic", ["spec", "partitions"], "twelve", "is not of type 'integer'"),
        ("FlinkDeployment", ["spec", "job", "upgradeMode"], "last_state", "is not one of"),
        ("FlinkDeployment", ["spec", "restartPolicy"], "Always", "Additional properties"),
        ("PodMonitor", ["spec", "podMetricsEndpoints", 0, "scrapeEvery"], "30s", "Additional properties"),
        ("StatefulSet", ["spec", "replicas"], "one", "is not of type 'integer'"),
        ("CronJob", ["spec", "jobTemplate", "spec", "activeDeadline"], 60, "Additional properties"),
        ("Namespace", ["metadata", "label"], {}, "Additional properties"),
    ],
)
def test_the_validation_refuses_what_the_operators_would(
    kind: str, path: list[str | int], value: Any, expected: str
) -> None:
    obj = next(o for o in _rendered() if o["kind"] == kind)
    node: Any = obj
    for step in path[:-1]:
        node = node[step]
    node[path[-1]] = value
    errors = schema_errors(obj)
    assert any(expected in e for e in errors), errors


# ---- versions ----------------------------------------------------------------------------------


def kafka_version_problems(kafka: dict[str, Any], table: list[dict[str, Any]]) -> list[str]:
    """Why the pinned Strimzi would refuse this Kafka's version (empty when it runs it)."""
    spec = kafka["spec"]["kafka"]
    supported = {entry["version"]: entry for entry in table if entry["supported"]}
    version = str(spec.get("version", ""))
    if version not in supported:
        return [f"Kafka {version} is not supported by Strimzi {VERSIONS['strimzi']['version']} "
                f"(it runs {', '.join(supported)})"]  # fmt: skip
    metadata = str(spec.get("metadataVersion", ""))
    if metadata != supported[version]["metadata"]:
        return [f"metadataVersion {metadata} is not Kafka {version}'s ({supported[version]['metadata']})"]
    return []


def test_the_kafka_version_is_one_the_pinned_strimzi_runs() -> None:
    table = _schema_file("strimzi")["kafka_versions"]
    kafka = _one(_rendered(), "Kafka")
    assert not kafka_version_problems(kafka, table)
    # the check can fail: the version this manifest asked for before Strimzi was pinned
    old = json.loads(json.dumps(kafka))
    old["spec"]["kafka"]["version"], old["spec"]["kafka"]["metadataVersion"] = "4.1.1", "4.1-IV1"
    assert "not supported by Strimzi" in kafka_version_problems(old, table)[0]
    wrong = json.loads(json.dumps(kafka))
    wrong["spec"]["kafka"]["metadataVersion"] = "4.2-IV1"
    assert kafka_version_problems(wrong, table)


def test_the_pins_the_vendored_schemas_and_the_readme_agree() -> None:
    readme = (ROOT / "deploy" / "README.md").read_text()
    for component, pin in VERSIONS.items():
        doc = _schema_file(component)
        assert pin["version"] in doc["source"], (component, doc["source"])
        assert f"{pin['version']}" in readme, f"deploy/README.md does not say which {component} to install"
    flink = _one(_rendered(), "FlinkDeployment")
    operator = _custom_kinds()["flink.apache.org/v1beta1/FlinkDeployment"]["schema"]
    flink_versions = operator["properties"]["spec"]["properties"]["flinkVersion"]["enum"]
    assert flink["spec"]["flinkVersion"] in flink_versions


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed here")
def test_the_render_matches_kubectl_kustomize(tmp_path: Path) -> None:
    copy = tmp_path / "k8s"
    shutil.copytree(K8S, copy)
    (copy / "secrets.env").write_text(EXAMPLE_ENV)
    out = subprocess.run(
        ["kubectl", "kustomize", str(copy)], capture_output=True, text=True, check=True
    ).stdout
    theirs = {(o["kind"], o["metadata"]["name"]): o for o in yaml.safe_load_all(out) if o}
    ours = {(o["kind"], o["metadata"]["name"]): o for o in _rendered()}
    assert ours == theirs


def test_the_render_refuses_what_it_does_not_implement(tmp_path: Path) -> None:
    copy = tmp_path / "k8s"
    shutil.copytree(K8S, copy)
    text = (copy / "kustomization.yaml").read_text()
    (copy / "kustomization.yaml").write_text(text + "commonLabels:\n  app: pilake\n")
    with pytest.raises(KustomizeError, match="commonLabels"):
        render(copy, files={"secrets.env": EXAMPLE_ENV})
    (copy / "kustomization.yaml").write_text(text.replace("disableNameSuffixHash: true", "labels: {}"))
    with pytest.raises(KustomizeError, match="disableNameSuffixHash"):
        render(copy, files={"secrets.env": EXAMPLE_ENV})


# ---- secrets -----------------------------------------------------------------------------------


def test_no_secret_value_is_committed_and_the_generated_secret_has_every_key_pods_use() -> None:
    for path in K8S.glob("*.yaml"):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == "Secret":
                raise AssertionError(f"{path.name} commits a Secret: generate it from secrets.env")
    ignored = subprocess.run(["git", "-C", str(ROOT), "check-ignore", "-q", "deploy/k8s/secrets.env"])
    assert ignored.returncode == 0, "deploy/k8s/secrets.env is not git-ignored"
    for key, value in (line.split("=", 1) for line in EXAMPLE_ENV.splitlines() if "=" in line):
        assert value == "", f"secrets.env.example gives {key} a value: leave values to secrets.env"
    objects = _rendered()
    secret = _one(objects, "Secret", "pilake-credentials")
    refs = {
        (node["secretKeyRef"]["name"], node["secretKeyRef"]["key"])
        for node in _walk(objects)
        if isinstance(node, dict) and "secretKeyRef" in node
    }
    assert refs and {name for name, _ in refs} == {"pilake-credentials"}
    assert {key for _, key in refs} == set(secret["data"]), "the Secret's keys and the pods' differ"
    filled = render(K8S, files={"secrets.env": "\n".join(f"{k}=v-{k}" for _, k in sorted(refs))})
    data = _one(filled, "Secret")["data"]
    assert {k: base64.b64decode(v).decode() for k, v in data.items()} == {k: f"v-{k}" for _, k in refs}


# ---- surviving a dependency's restart ----------------------------------------------------------


def test_the_stream_job_is_restarted_for_as_long_as_a_dependency_is_down() -> None:
    spec = _one(_rendered(), "FlinkDeployment")["spec"]
    conf = spec["flinkConfiguration"]
    # when the job's own restarts run out, the operator restarts the failed job from its state
    assert conf["kubernetes.operator.job.restart.failed"] == "true"
    assert spec["job"]["upgradeMode"] == "last-state"
    assert conf["high-availability.type"] == "kubernetes" and conf["high-availability.storageDir"]
    assert conf["restart-strategy.type"] == "exponential-delay"
    assert int(conf["restart-strategy.exponential-delay.attempts-before-reset-backoff"]) >= 2**31 - 1


def test_the_maintenance_job_has_a_deadline_within_its_period() -> None:
    cron = _one(_rendered(), "CronJob", "pilake-maintenance")
    minute, hour = cron["spec"]["schedule"].split()[:2]
    assert minute.isdigit() and hour == "*", "the deadline below assumes an hourly schedule"
    deadline = cron["spec"]["jobTemplate"]["spec"]["activeDeadlineSeconds"]
    assert 0 < deadline < 3600


# ---- metrics -----------------------------------------------------------------------------------


def _pods(objects: list[dict[str, Any]]) -> list[tuple[dict[str, str], set[str]]]:
    """(labels, container port names) of the pods the rendered objects make, as the operators
    label them: Strimzi's Kafka pods, the Flink operator's JobManager and TaskManagers."""
    pods = []
    for obj in objects:
        if obj["kind"] in ("StatefulSet", "Deployment", "Job"):
            template = obj["spec"]["template"]
            ports = {p["name"] for c in template["spec"]["containers"] for p in c.get("ports", [])}
            pods.append((template["metadata"]["labels"], ports))
        elif obj["kind"] == "FlinkDeployment":
            labels = {"app": obj["metadata"]["name"], "type": "flink-native-kubernetes"}
            common = {
                p["name"]
                for c in obj["spec"]["podTemplate"]["spec"]["containers"]
                for p in c.get("ports", [])
            }
            tm = obj["spec"]["taskManager"].get("podTemplate", {}).get("spec", {}).get("containers", [])
            pods.append(({**labels, "component": "jobmanager"}, common))
            pods.append(
                (
                    {**labels, "component": "taskmanager"},
                    common | {p["name"] for c in tm for p in c.get("ports", [])},
                )
            )
        elif obj["kind"] == "Kafka":
            # Strimzi declares tcp-prometheus on its pods when metricsConfig is set
            ports = {"tcp-prometheus"} if obj["spec"]["kafka"].get("metricsConfig") else set()
            pods.append(({"strimzi.io/cluster": obj["metadata"]["name"], "strimzi.io/kind": "Kafka"}, ports))
    return pods


def test_every_pod_monitor_scrapes_ports_its_pods_declare() -> None:
    objects = _rendered()
    monitors = [o for o in objects if o["kind"] == "PodMonitor"]
    scraped = set()
    for monitor in monitors:
        wanted = monitor["spec"]["selector"]["matchLabels"]
        pods = [(labels, ports) for labels, ports in _pods(objects) if wanted.items() <= labels.items()]
        assert pods, f"PodMonitor {monitor['metadata']['name']} selects no pod"
        for endpoint in monitor["spec"]["podMetricsEndpoints"]:
            assert any(endpoint["port"] in ports for _, ports in pods), (
                monitor["metadata"]["name"],
                endpoint,
            )
            scraped.add(endpoint["port"])
    assert {"flink-metrics", "tcp-prometheus", "metrics", "train-0", "loader-0"} <= scraped


def test_the_scraped_ports_are_the_ones_the_processes_serve() -> None:
    objects = _rendered()
    flink = _one(objects, "FlinkDeployment")["spec"]
    conf = flink["flinkConfiguration"]
    assert conf["metrics.reporter.prom.factory.class"].endswith("PrometheusReporterFactory")
    ports = {
        p["name"]: p["containerPort"] for c in flink["podTemplate"]["spec"]["containers"] for p in c["ports"]
    }
    assert ports["flink-metrics"] == int(conf["metrics.reporter.prom.port"])
    # one pilake_stream endpoint per Python worker (= slot), from metrics.stream_port up
    settings = Settings(home=Path("/unused"))
    workers = {
        p["name"]: p["containerPort"]
        for c in flink["taskManager"]["podTemplate"]["spec"]["containers"]
        for p in c["ports"]
        if p["name"].startswith("pilake-stream-")
    }
    slots = int(conf["taskmanager.numberOfTaskSlots"])
    assert slots <= settings.metrics_port_range
    assert workers == {f"pilake-stream-{i}": settings.stream_metrics_port + i for i in range(slots)}
    # ClickHouse serves the port its container declares
    clickhouse = _one(objects, "StatefulSet", "clickhouse")["spec"]["template"]["spec"]
    xml = ET.fromstring(_one(objects, "ConfigMap", "clickhouse-config")["data"]["prometheus.xml"])
    (container,) = clickhouse["containers"]
    declared = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert declared["metrics"] == int(xml.findtext("prometheus/port") or 0)
    mount = next(m for m in container["volumeMounts"] if m.get("subPath") == "prometheus.xml")
    assert mount["mountPath"].startswith("/etc/clickhouse-server/config.d/")
    assert any(v.get("configMap", {}).get("name") == "clickhouse-config" for v in clickhouse["volumes"])
    # Strimzi's reporter exports what the allow list names
    metrics = _one(objects, "Kafka")["spec"]["kafka"]["metricsConfig"]
    assert metrics["type"] == "strimziMetricsReporter" and metrics["values"]["allowList"]
