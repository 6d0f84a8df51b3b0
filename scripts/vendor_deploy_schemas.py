"""Vendor the schemas deploy/k8s is validated against (tests/deploy/test_k8s_schemas.py), at the
versions pinned in deploy/versions.toml, from git clones of the upstream repositories:

    python scripts/vendor_deploy_schemas.py \\
        --kubernetes-client PATH/kubernetes-client/python \\
        --strimzi PATH/strimzi/strimzi-kafka-operator \\
        --flink-operator PATH/apache/flink-kubernetes-operator \\
        --prometheus-operator PATH/prometheus-operator/prometheus-operator

Only the kinds deploy/k8s uses are kept, without their descriptions (they are most of the bytes).
Kubernetes' own kinds come from the OpenAPI (v2) document the Python client is generated from: its
tag vMAJOR.* is generated from Kubernetes release-1.MAJOR (the client's scripts/constants.py says
which). Each output file records where it came from.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "deploy" / "schemas"

KUBERNETES_KINDS = {
    "v1/Namespace": "io.k8s.api.core.v1.Namespace",
    "v1/ConfigMap": "io.k8s.api.core.v1.ConfigMap",
    "v1/Secret": "io.k8s.api.core.v1.Secret",
    "v1/Service": "io.k8s.api.core.v1.Service",
    "apps/v1/StatefulSet": "io.k8s.api.apps.v1.StatefulSet",
    "apps/v1/Deployment": "io.k8s.api.apps.v1.Deployment",  # the Pushgateway (pushgateway.yaml)
    "batch/v1/CronJob": "io.k8s.api.batch.v1.CronJob",
    "batch/v1/Job": "io.k8s.api.batch.v1.Job",  # the training workload (training.yaml)
    "v1/PersistentVolumeClaim": "io.k8s.api.core.v1.PersistentVolumeClaim",
    # disruption budgets and network policies (issue 32: tests/deploy/test_k8s_policy.py)
    "policy/v1/PodDisruptionBudget": "io.k8s.api.policy.v1.PodDisruptionBudget",
    "networking.k8s.io/v1/NetworkPolicy": "io.k8s.api.networking.v1.NetworkPolicy",
    # custom resources' metadata is validated as Kubernetes validates it
    "ObjectMeta": "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta",
}
STRIMZI_CRDS = [
    "040-Crd-kafka.yaml",
    "043-Crd-kafkatopic.yaml",
    "044-Crd-kafkauser.yaml",
    "045-Crd-kafkanodepool.yaml",
]
REPORTER_EXAMPLES = "packaging/examples/metrics/strimzi-metrics-reporter"
FLINK_CRDS = ["flinkdeployments.flink.apache.org-v1.yml"]
PROMETHEUS_CRDS = ["podmonitors", "servicemonitors", "prometheusrules"]


def _show(repo: Path, ref: str, path: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), "show", f"{ref}:{path}"], check=True, capture_output=True, text=True
    ).stdout


def _commit(repo: Path, ref: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), "rev-parse", f"{ref}^{{commit}}"], check=True, capture_output=True, text=True
    ).stdout.strip()


def _strip(node: Any, names: bool = False) -> Any:
    """The schema without its prose; `names`: node maps property names (keep them all)."""
    if isinstance(node, dict):
        return {
            k: _strip(v, names=k in ("properties", "definitions") and not names)
            for k, v in node.items()
            if names or k not in ("description", "example")
        }
    if isinstance(node, list):
        return [_strip(v) for v in node]
    return node


def _refs(node: Any) -> set[str]:
    found: set[str] = set()
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str):
            found.add(ref.removeprefix("#/definitions/"))
        for value in node.values():
            found |= _refs(value)
    elif isinstance(node, list):
        for value in node:
            found |= _refs(value)
    return found


def kubernetes(repo: Path, version: str) -> dict[str, Any]:
    major = version.split(".")[1]
    tags = subprocess.run(
        ["git", "-C", str(repo), "tag", "--list", f"v{major}.*"], check=True, capture_output=True, text=True
    ).stdout.split()
    releases = [t for t in tags if re.fullmatch(r"v\d+\.\d+\.\d+", t)]
    tag = max(releases, key=lambda t: [int(x) for x in t[1:].split(".")])
    constants = _show(repo, tag, "scripts/constants.py")
    assert f'KUBERNETES_BRANCH = "release-{version}"' in constants, (tag, version)
    spec = json.loads(_show(repo, tag, "kubernetes/swagger.json.unprocessed"))
    definitions = spec["definitions"]
    keep: dict[str, Any] = {}
    todo = list(KUBERNETES_KINDS.values())
    while todo:
        name = todo.pop()
        if name in keep:
            continue
        keep[name] = _strip(definitions[name])
        todo += sorted(_refs(keep[name]) - set(keep))
    return {
        "source": f"kubernetes-client/python {tag} ({_commit(repo, tag)}) "
        f"kubernetes/swagger.json.unprocessed, generated from Kubernetes release-{version}",
        "kinds": KUBERNETES_KINDS,
        "definitions": dict(sorted(keep.items())),
    }


def _crd_schemas(texts: list[str]) -> dict[str, Any]:
    kinds: dict[str, Any] = {}
    for text in texts:
        crd = yaml.safe_load(text)
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            if version["served"]:
                schema = _strip(version["schema"]["openAPIV3Schema"])
                kinds[f"{group}/{version['name']}/{kind}"] = {"scope": crd["spec"]["scope"], "schema": schema}
    return kinds


def strimzi(repo: Path, version: str) -> dict[str, Any]:
    texts = [_show(repo, version, f"packaging/install/cluster-operator/{name}") for name in STRIMZI_CRDS]
    table = yaml.safe_load(_show(repo, version, "kafka-versions.yaml"))
    # the series Strimzi's own dashboard for its metrics reporter reads: names the alert rules
    # may use for Kafka (the reporter's names are fixed, not mapped by rules)
    dashboard = _show(repo, version, f"{REPORTER_EXAMPLES}/grafana-dashboards/strimzi-kafka.json")
    series = sorted(set(re.findall(r"\bkafka_[a-z0-9_]+_[a-z0-9_]+", dashboard)))
    return {
        "source": f"strimzi/strimzi-kafka-operator {version} ({_commit(repo, version)}) "
        f"packaging/install/cluster-operator/, kafka-versions.yaml and {REPORTER_EXAMPLES}/",
        "metrics_reporter_series": series,
        "kinds": _crd_schemas(texts),
        "kafka_versions": [
            {"version": str(v["version"]), "metadata": str(v.get("metadata", "")),
             "supported": bool(v["supported"]), "default": bool(v["default"])}
            for v in table
        ],
    }  # fmt: skip


def flink_operator(repo: Path, version: str) -> dict[str, Any]:
    tag = f"release-{version}"
    texts = [_show(repo, tag, f"helm/flink-kubernetes-operator/crds/{name}") for name in FLINK_CRDS]
    return {
        "source": f"apache/flink-kubernetes-operator {tag} ({_commit(repo, tag)}) "
        f"helm/flink-kubernetes-operator/crds/",
        "kinds": _crd_schemas(texts),
    }


def prometheus_operator(repo: Path, version: str) -> dict[str, Any]:
    tag = f"v{version}"
    texts = [
        _show(repo, tag, f"example/prometheus-operator-crd/monitoring.coreos.com_{name}.yaml")
        for name in PROMETHEUS_CRDS
    ]
    return {
        "source": f"prometheus-operator/prometheus-operator {tag} ({_commit(repo, tag)}) "
        f"example/prometheus-operator-crd/",
        "kinds": _crd_schemas(texts),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--kubernetes-client", type=Path, required=True)
    parser.add_argument("--strimzi", type=Path, required=True)
    parser.add_argument("--flink-operator", type=Path, required=True)
    parser.add_argument("--prometheus-operator", type=Path, required=True)
    args = parser.parse_args()
    pins = tomllib.loads((ROOT / "deploy" / "versions.toml").read_text())
    OUT.mkdir(parents=True, exist_ok=True)
    for old in OUT.glob("*.json"):
        old.unlink()
    outputs = {
        f"kubernetes-{pins['kubernetes']['version']}.json": kubernetes(
            args.kubernetes_client, pins["kubernetes"]["version"]
        ),
        f"strimzi-{pins['strimzi']['version']}.json": strimzi(args.strimzi, pins["strimzi"]["version"]),
        f"flink-kubernetes-operator-{pins['flink-kubernetes-operator']['version']}.json": flink_operator(
            args.flink_operator, pins["flink-kubernetes-operator"]["version"]
        ),
        f"prometheus-operator-{pins['prometheus-operator']['version']}.json": prometheus_operator(
            args.prometheus_operator, pins["prometheus-operator"]["version"]
        ),
    }
    for name, doc in outputs.items():
        (OUT / name).write_text(json.dumps(doc, separators=(",", ":"), sort_keys=False) + "\n")
        print(f"{name}: {(OUT / name).stat().st_size:,} bytes  ({doc['source']})")


if __name__ == "__main__":
    main()
