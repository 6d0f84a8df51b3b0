"""deploy/k8s as an SRE would review it (issue 32 item 2): the kube-score-style rules of
tests/deploy/_policy.py hold for every rendered object, and each rule catches a manifest
broken on purpose (so the rule can fail)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.deploy import _policy
from tests.deploy._kustomize import render

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
EXAMPLE_ENV = (K8S / "secrets.env.example").read_text()


def _rendered() -> list[dict[str, Any]]:
    return render(K8S, files={"secrets.env": EXAMPLE_ENV})


def _find(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (found,) = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    return found


@pytest.mark.parametrize(
    "rule",
    [
        _policy.security_violations,
        _policy.resource_violations,
        _policy.cronjob_violations,
        _policy.pdb_violations,
        _policy.network_violations,
    ],
    ids=lambda r: r.__name__,
)
def test_the_rendered_manifests_pass_the_policy(rule: Callable[[list[dict[str, Any]]], list[str]]) -> None:
    assert rule(_rendered()) == []


def test_every_workload_is_seen_by_the_policy() -> None:
    seen = {c.where.split(" container")[0].split(" ")[0] for c in _policy.containers(_rendered())}
    assert {
        "StatefulSet/clickhouse",
        "CronJob/pilake-verify",
        "CronJob/pilake-maintenance",
        "Job/pilake-train",
        "FlinkDeployment/pilake-stream",
        "KafkaNodePool/broker",
        "KafkaNodePool/controller",
        "Kafka/pilake",
    } <= seen
    stateful = {w.where for w in _policy.stateful_workloads(_rendered())}
    assert {"StatefulSet/clickhouse", "KafkaNodePool/broker", "FlinkDeployment/pilake-stream"} <= stateful


def _clickhouse_container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    container: dict[str, Any] = _find(objects, "StatefulSet", "clickhouse")["spec"]["template"]["spec"][
        "containers"
    ][0]
    return container


def _verify_pod(objects: list[dict[str, Any]]) -> dict[str, Any]:
    pod: dict[str, Any] = _find(objects, "CronJob", "pilake-verify")["spec"]["jobTemplate"]["spec"][
        "template"
    ]["spec"]
    return pod


def _no_security_context(objects: list[dict[str, Any]]) -> None:
    _clickhouse_container(objects).pop("securityContext", None)
    _find(objects, "StatefulSet", "clickhouse")["spec"]["template"]["spec"].pop("securityContext", None)


def _escalation(objects: list[dict[str, Any]]) -> None:
    _verify_pod(objects)["containers"][0]["securityContext"]["allowPrivilegeEscalation"] = True


def _root_kafka(objects: list[dict[str, Any]]) -> None:
    _find(objects, "KafkaNodePool", "broker")["spec"]["template"]["kafkaContainer"]["securityContext"][
        "runAsUser"
    ] = 0


def _flink_writable_root_without_reason(objects: list[dict[str, Any]]) -> None:
    _find(objects, "FlinkDeployment", "pilake-stream")["spec"]["podTemplate"]["metadata"]["annotations"].pop(
        _policy.WRITABLE_ROOT
    )


def _no_limits(objects: list[dict[str, Any]]) -> None:
    _clickhouse_container(objects)["resources"].pop("limits")


def _no_kafka_resources(objects: list[dict[str, Any]]) -> None:
    _find(objects, "KafkaNodePool", "broker")["spec"].pop("resources")


def _command_replaced(objects: list[dict[str, Any]]) -> None:
    _verify_pod(objects)["containers"][0]["command"] = ["/bin/sh", "-c"]


def _state_on_empty_dir(objects: list[dict[str, Any]]) -> None:
    for volume in _verify_pod(objects)["volumes"]:
        if volume["name"] == "verify-state":
            volume.pop("persistentVolumeClaim")
            volume["emptyDir"] = {}


def _no_clickhouse_pdb(objects: list[dict[str, Any]]) -> None:
    objects.remove(_find(objects, "PodDisruptionBudget", "clickhouse"))


def _no_flink_pdb(objects: list[dict[str, Any]]) -> None:
    objects.remove(_find(objects, "PodDisruptionBudget", "pilake-stream"))


def _no_kafka_pdb(objects: list[dict[str, Any]]) -> None:
    _find(objects, "Kafka", "pilake")["spec"]["kafka"]["template"].pop("podDisruptionBudget")


def _no_default_deny(objects: list[dict[str, Any]]) -> None:
    objects.remove(_find(objects, "NetworkPolicy", "default-deny-ingress"))


def _no_catalog_allow(objects: list[dict[str, Any]]) -> None:
    objects.remove(_find(objects, "NetworkPolicy", "clickhouse"))


def _catalog_open_to_all(objects: list[dict[str, Any]]) -> None:
    _find(objects, "NetworkPolicy", "clickhouse")["spec"]["ingress"].append({})


@pytest.mark.parametrize(
    ("breakage", "expected"),
    [
        (_no_security_context, "StatefulSet/clickhouse container clickhouse: runAsNonRoot is not true"),
        (_escalation, "allowPrivilegeEscalation is not false"),
        (_root_kafka, "KafkaNodePool/broker container kafka: runAsUser 0"),
        (_flink_writable_root_without_reason, "root filesystem writable without a reason"),
        (_no_limits, "StatefulSet/clickhouse container clickhouse: no limits.memory"),
        (_no_kafka_resources, "KafkaNodePool/broker container kafka: no requests.cpu"),
        (_command_replaced, "replaces the image's entrypoint"),
        (_state_on_empty_dir, "--state /var/lib/pilake-verify/state.json is not on a PersistentVolumeClaim"),
        (_no_clickhouse_pdb, "StatefulSet/clickhouse: no PodDisruptionBudget"),
        (_no_flink_pdb, "FlinkDeployment/pilake-stream: no PodDisruptionBudget"),
        (_no_kafka_pdb, "KafkaNodePool/broker: its Kafka sets no template.podDisruptionBudget"),
        (_no_default_deny, "namespace pilake: no default-deny ingress NetworkPolicy"),
        (_no_catalog_allow, "needed flow denied: the stream job records episodes in the catalog"),
        (
            _catalog_open_to_all,
            "flow allowed that nothing needs: a pod of another namespace reads the catalog",
        ),
    ],
    ids=lambda v: getattr(v, "__name__", "")[1:] or None,
)
def test_each_rule_catches_a_broken_manifest(
    breakage: Callable[[list[dict[str, Any]]], None], expected: str
) -> None:
    objects = copy.deepcopy(_rendered())
    assert _policy.all_violations(objects) == []
    breakage(objects)
    violations = _policy.all_violations(objects)
    assert any(expected in v for v in violations), violations


def test_the_s3_endpoint_is_written_once_and_reaches_flink() -> None:
    objects = _rendered()
    endpoint = _find(objects, "ConfigMap", "pilake-env")["data"]["AWS_ENDPOINT_URL"]
    flink = _find(objects, "FlinkDeployment", "pilake-stream")
    assert flink["spec"]["flinkConfiguration"]["s3.endpoint"] == endpoint
    written = [
        p.name for p in sorted(K8S.glob("*.yaml")) for line in p.read_text().splitlines() if endpoint in line
    ]
    assert written == ["config.yaml"], written


def test_the_render_refuses_replacements_it_does_not_implement(tmp_path: Path) -> None:
    from tests.deploy._kustomize import KustomizeError

    (tmp_path / "cm.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata: {x: '1'}\n"
    )
    base = "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [cm.yaml]\n"
    cases = {
        "source: {kind: ConfigMap, name: a, fieldPath: data.y}": "data.y is missing",
        "source: {kind: ConfigMap, name: b, fieldPath: data.x}": "no ConfigMap b",
        "source: {kind: ConfigMap, name: a, fieldPath: 'data.[x]'}": "list selectors",
    }
    for source, message in cases.items():
        target = (
            "targets: [{select: {kind: ConfigMap, name: a}, fieldPaths: [data.z], options: {create: true}}]"
        )
        (tmp_path / "kustomization.yaml").write_text(base + f"replacements:\n  - {source}\n    {target}\n")
        with pytest.raises(KustomizeError, match=message):
            render(tmp_path)
    (tmp_path / "kustomization.yaml").write_text(
        base + "replacements:\n  - source: {kind: ConfigMap, name: a, fieldPath: data.x}\n"
        "    targets: [{select: {kind: ConfigMap, name: a}, fieldPaths: ['data.z\\.w']}]\n"
    )
    with pytest.raises(KustomizeError, match=r"data.z\\.w is missing"):
        render(tmp_path)


def test_the_readme_installs_in_an_order_that_works_from_an_empty_cluster() -> None:
    import re

    text = (ROOT / "deploy" / "README.md").read_text()
    section = text[text.index("### Install order, from an empty cluster") :]
    block = section[section.index("```bash") : section.index("```", section.index("```bash") + 7)]
    commands = [
        line.strip()
        for line in block.replace("\\\n", " ").splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]

    def first(pattern: str) -> int:
        hits = [i for i, c in enumerate(commands) if re.search(pattern, c)]
        assert hits, f"the install order has no command matching {pattern!r}"
        return hits[0]

    namespace = first(r"kubectl apply -f deploy/k8s/namespace\.yaml")
    cert_manager = first(r"cert-manager\.yaml")
    strimzi = first(r"strimzi-cluster-operator-1\.2\.0\.yaml")
    flink = first(r"helm install flink-kubernetes-operator")
    crds = first(r"kubectl wait --for=condition=Established")
    app = first(r"kubectl apply -k deploy/k8s$")
    assert namespace < cert_manager < flink < crds < app and namespace < strimzi < crds
    # Strimzi's bindings point at its ServiceAccount in pilake, and it is created there
    assert "sed 's/namespace: myproject/namespace: pilake/'" in commands[strimzi]
    assert "kubectl create -n pilake" in commands[strimzi]
    # the Flink operator watches pilake, so the chart makes the flink ServiceAccount there
    assert "watchNamespaces={pilake}" in commands[flink] and " -n " in commands[flink]
    flink_sa = _find(_rendered(), "FlinkDeployment", "pilake-stream")["spec"]["serviceAccount"]
    assert flink_sa == "flink"  # the chart's jobServiceAccount name
    for crd in (
        "kafkas.kafka.strimzi.io",
        "flinkdeployments.flink.apache.org",
        "podmonitors.monitoring.coreos.com",
    ):
        assert f"crd/{crd}" in commands[crds]
