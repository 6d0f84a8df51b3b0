"""kube-score-style rules over the rendered deploy/k8s, as an SRE reviewing the manifests would apply them.

No cluster and no kube-score/kubeconform here, so these rules are written out in Python over the
objects `tests/deploy/_kustomize.render` returns. Each rule returns the violations it finds as
sentences (empty: none); tests/deploy/test_k8s_policy.py asserts there are none, and that each
rule catches a manifest broken on purpose.

The rules:
- every container runs as non-root (runAsNonRoot on the container or pod), with
  allowPrivilegeEscalation false, capabilities drop ALL, the runtime's seccomp profile, and a
  read-only root filesystem unless its pod template says why not in the annotation
  `pilake.io/writable-root-filesystem` (an image entrypoint that writes its own config);
- every container requests cpu and memory and limits memory (no cpu limit required: CPU
  limits throttle a streaming job without protecting anyone);
- a CronJob keeps its image's entrypoint (no `command`), so the image's user drop still runs;
- every stateful workload (a StatefulSet, a Strimzi KafkaNodePool, a FlinkDeployment) has a
  PodDisruptionBudget that selects its pods and lets a drain proceed one pod at a time;
- each namespace has a default-deny ingress NetworkPolicy, and the flows of FLOWS are allowed;
- a CronJob's `--state`/`--report` files are on a PersistentVolumeClaim, not an emptyDir.

Pods of custom resources are read where their operator takes them from: a FlinkDeployment's
podTemplate (the operator sets cpu and memory requests = limits from jobManager/taskManager
.resource), a KafkaNodePool's resources and template, the Kafka's entityOperator.

Example:
    >>> from pathlib import Path
    >>> from tests.deploy._kustomize import render
    >>> objects = render(Path("deploy/k8s"), files={"secrets.env": "a=1\\n"})
    >>> all_violations(objects)
    []
"""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

WRITABLE_ROOT = "pilake.io/writable-root-filesystem"
# Operators' pod labels: Flink's native Kubernetes pods carry app: <FlinkDeployment name>;
# Strimzi's carry strimzi.io/cluster and strimzi.io/pool-name.
Obj = dict[str, Any]


@dataclass(frozen=True)
class Container:
    """One container as the cluster will run it: where it came from and what applies to it."""

    where: str  # "Kind/name container"
    container: Obj
    pod_security: Obj
    pod_annotations: dict[str, str]
    # resources set by an operator from its own fields (FlinkDeployment): None = from the container
    resources: Obj | None = None


def _pod_spec_containers(where: str, template: Obj) -> Iterator[Container]:
    spec = template.get("spec", {})
    annotations = template.get("metadata", {}).get("annotations", {}) or {}
    for key in ("initContainers", "containers"):
        for c in spec.get(key, []) or []:
            yield Container(
                f"{where} container {c['name']}", c, spec.get("securityContext", {}) or {}, annotations
            )


def _flink_containers(obj: Obj) -> Iterator[Container]:
    where = f"FlinkDeployment/{obj['metadata']['name']}"
    spec = obj["spec"]
    shared = spec.get("podTemplate", {})
    for role in ("jobManager", "taskManager"):
        own = spec.get(role, {}).get("podTemplate", {})
        res = spec.get(role, {}).get("resource", {})
        # the operator gives flink-main-container cpu and memory requests = limits from .resource
        resources = {
            "requests": {"cpu": res.get("cpu"), "memory": res.get("memory")},
            "limits": {"memory": res.get("memory")},
        }
        merged: dict[str, Obj] = {}
        for template in (shared, own):
            for c in template.get("spec", {}).get("containers", []) or []:
                merged.setdefault(c["name"], {}).update({k: v for k, v in c.items() if k != "ports"})
        security = {
            **shared.get("spec", {}).get("securityContext", {}),
            **own.get("spec", {}).get("securityContext", {}),
        }
        annotations = {
            **(shared.get("metadata", {}).get("annotations", {}) or {}),
            **(own.get("metadata", {}).get("annotations", {}) or {}),
        }
        for name, c in merged.items():
            yield Container(
                f"{where} {role} container {name}",
                c,
                security,
                annotations,
                resources if name == "flink-main-container" else None,
            )


def _strimzi_containers(obj: Obj) -> Iterator[Container]:
    where = f"{obj['kind']}/{obj['metadata']['name']}"
    spec = obj["spec"]
    if obj["kind"] == "KafkaNodePool":
        template = spec.get("template", {})
        pod = template.get("pod", {})
        yield Container(
            f"{where} container kafka",
            {"name": "kafka", "securityContext": template.get("kafkaContainer", {}).get("securityContext")},
            pod.get("securityContext", {}) or {},
            pod.get("metadata", {}).get("annotations", {}) or {},
            spec.get("resources", {}),
        )
    elif obj["kind"] == "Kafka":
        entity = spec.get("entityOperator", {})
        template = entity.get("template", {})
        pod = template.get("pod", {})
        for op in ("topicOperator", "userOperator"):
            if op in entity:
                yield Container(
                    f"{where} entityOperator container {op}",
                    {
                        "name": op,
                        "securityContext": template.get(f"{op}Container", {}).get("securityContext"),
                    },
                    pod.get("securityContext", {}) or {},
                    pod.get("metadata", {}).get("annotations", {}) or {},
                    entity[op].get("resources", {}),
                )


def containers(objects: list[Obj]) -> Iterator[Container]:
    """Every container the rendered objects make the cluster run (built-in and operator-made)."""
    for obj in objects:
        kind, name = obj["kind"], obj["metadata"]["name"]
        if kind in {"StatefulSet", "Deployment", "DaemonSet", "Job", "ReplicaSet"}:
            yield from _pod_spec_containers(f"{kind}/{name}", obj["spec"]["template"])
        elif kind == "CronJob":
            yield from _pod_spec_containers(f"{kind}/{name}", obj["spec"]["jobTemplate"]["spec"]["template"])
        elif kind == "Pod":
            yield from _pod_spec_containers(f"{kind}/{name}", obj)
        elif kind == "FlinkDeployment":
            yield from _flink_containers(obj)
        elif kind in {"KafkaNodePool", "Kafka"}:
            yield from _strimzi_containers(obj)


def security_violations(objects: list[Obj]) -> list[str]:
    """Containers that could run as root, escalate, keep capabilities or write their image."""
    out = []
    for c in containers(objects):
        sc = c.container.get("securityContext") or {}
        pod = c.pod_security
        if sc.get("runAsNonRoot", pod.get("runAsNonRoot")) is not True:
            out.append(f"{c.where}: runAsNonRoot is not true")
        if sc.get("runAsUser", pod.get("runAsUser")) == 0:
            out.append(f"{c.where}: runAsUser 0")
        if sc.get("allowPrivilegeEscalation") is not False:
            out.append(f"{c.where}: allowPrivilegeEscalation is not false")
        if sc.get("privileged"):
            out.append(f"{c.where}: privileged")
        if "ALL" not in (sc.get("capabilities", {}) or {}).get("drop", []):
            out.append(f"{c.where}: capabilities do not drop ALL")
        seccomp = (sc.get("seccompProfile") or pod.get("seccompProfile") or {}).get("type")
        if seccomp not in {"RuntimeDefault", "Localhost"}:
            out.append(f"{c.where}: no RuntimeDefault seccomp profile")
        if (
            sc.get("readOnlyRootFilesystem") is not True
            and not c.pod_annotations.get(WRITABLE_ROOT, "").strip()
        ):
            out.append(f"{c.where}: root filesystem writable without a reason ({WRITABLE_ROOT})")
    return out


def resource_violations(objects: list[Obj]) -> list[str]:
    """Containers without cpu and memory requests or a memory limit."""
    out = []
    for c in containers(objects):
        res = c.resources if c.resources is not None else c.container.get("resources", {}) or {}
        requests, limits = res.get("requests", {}) or {}, res.get("limits", {}) or {}
        for what, table, key in (
            ("requests", requests, "cpu"),
            ("requests", requests, "memory"),
            ("limits", limits, "memory"),
        ):
            if table.get(key) in (None, ""):
                out.append(f"{c.where}: no {what}.{key}")
    return out


def cronjob_violations(objects: list[Obj]) -> list[str]:
    """CronJobs that replace the image's entrypoint, or keep --state/--report on an emptyDir."""
    out = []
    for obj in objects:
        if obj["kind"] != "CronJob":
            continue
        pod = obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        for c in pod["containers"]:
            where = f"CronJob/{obj['metadata']['name']} container {c['name']}"
            if c.get("command"):
                out.append(f"{where}: replaces the image's entrypoint (command {c['command']})")
            words = shlex.split(" ".join(c.get("args", [])).replace("$(", "").replace(")", ""))
            for flag in ("--state", "--report"):
                if flag not in words:
                    continue
                path = words[words.index(flag) + 1]
                mounts = [
                    m for m in c.get("volumeMounts", []) if path.startswith(m["mountPath"].rstrip("/") + "/")
                ]
                if not mounts:
                    out.append(f"{where}: {flag} {path} is on the container's own filesystem")
                    continue
                volume = volumes.get(max(mounts, key=lambda m: len(m["mountPath"]))["name"], {})
                if "persistentVolumeClaim" not in volume:
                    out.append(f"{where}: {flag} {path} is not on a PersistentVolumeClaim ({sorted(volume)})")
    return out


def _matches(selector: Obj, labels: dict[str, str]) -> bool:
    if selector.get("matchExpressions"):
        raise ValueError(f"matchExpressions are not evaluated by this policy: {selector}")
    return all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items())


@dataclass(frozen=True)
class Workload:
    """A stateful workload's pods: their namespace, labels and count."""

    where: str
    namespace: str
    labels: dict[str, str]
    replicas: int


def stateful_workloads(objects: list[Obj]) -> list[Workload]:
    """StatefulSets, KafkaNodePools and FlinkDeployments: what a node drain must not take at once."""
    out = []
    for obj in objects:
        kind, meta = obj["kind"], obj["metadata"]
        ns = meta.get("namespace", "")
        if kind == "StatefulSet":
            labels = obj["spec"]["template"]["metadata"]["labels"]
            out.append(Workload(f"StatefulSet/{meta['name']}", ns, labels, obj["spec"].get("replicas", 1)))
        elif kind == "KafkaNodePool":
            labels = {
                "strimzi.io/cluster": meta["labels"]["strimzi.io/cluster"],
                "strimzi.io/pool-name": meta["name"],
            }
            out.append(Workload(f"KafkaNodePool/{meta['name']}", ns, labels, obj["spec"]["replicas"]))
        elif kind == "FlinkDeployment":
            out.append(Workload(f"FlinkDeployment/{meta['name']}", ns, {"app": meta["name"]}, 2))
    return out


def pdb_violations(objects: list[Obj]) -> list[str]:
    """Stateful workloads that no PodDisruptionBudget covers, or that one would let drain at once
    (maxUnavailable >= replicas but > 1) or never drain (minAvailable = replicas)."""
    out = []
    pdbs = [o for o in objects if o["kind"] == "PodDisruptionBudget"]
    kafka = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Kafka"}
    for w in stateful_workloads(objects):
        if w.where.startswith("KafkaNodePool/"):
            # Strimzi makes the PDB of a cluster's pods itself, from the Kafka's template
            cluster = kafka.get(w.labels["strimzi.io/cluster"], {})
            budget = cluster.get("spec", {}).get("kafka", {}).get("template", {}).get("podDisruptionBudget")
            if not budget or budget.get("maxUnavailable") != 1:
                out.append(f"{w.where}: its Kafka sets no template.podDisruptionBudget.maxUnavailable: 1")
            continue
        covering = [
            p
            for p in pdbs
            if p["metadata"].get("namespace", "") == w.namespace
            and _matches(p["spec"].get("selector", {}), w.labels)
        ]
        if not covering:
            out.append(f"{w.where}: no PodDisruptionBudget selects its pods {w.labels}")
        for p in covering:
            spec = p["spec"]
            if "minAvailable" in spec and spec["minAvailable"] >= w.replicas:
                out.append(f"{w.where}: PDB {p['metadata']['name']} minAvailable blocks every drain")
            if spec.get("maxUnavailable", 1) != 1:
                out.append(f"{w.where}: PDB {p['metadata']['name']} lets more than one pod go at once")
    return out


@dataclass(frozen=True)
class Flow:
    """A connection the data flow needs: from pods (labels, in a namespace) to pods on a port."""

    why: str
    src_namespace: str
    src_labels: dict[str, str]
    dst_labels: dict[str, str]
    port: int
    dst_namespace: str = "pilake"


FLINK = {"app": "pilake-stream"}
FLOWS = [
    Flow("the stream job records episodes in the catalog", "pilake", FLINK, {"app": "clickhouse"}, 8123),
    Flow(
        "maintenance updates the catalog",
        "pilake",
        {"app": "pilake-maintenance"},
        {"app": "clickhouse"},
        8123,
    ),
    Flow(
        "the trainer resolves its dataset pin", "pilake", {"app": "pilake-train"}, {"app": "clickhouse"}, 8123
    ),
    Flow("TaskManagers register with the JobManager (RPC)", "pilake", FLINK, FLINK, 6123),
    Flow("TaskManagers fetch the job's blobs", "pilake", FLINK, FLINK, 6124),
    Flow("the Flink operator drives the JobManager's REST API", "flink-operator", {}, FLINK, 8081),
    Flow(
        "hosts of a training run meet at host 0's rendezvous",
        "pilake",
        {"app": "pilake-train"},
        {"app": "pilake-train"},
        29500,
    ),
    Flow(
        "NCCL between training hosts (any port)",
        "pilake",
        {"app": "pilake-train"},
        {"app": "pilake-train"},
        40000,
    ),
    Flow("Prometheus scrapes Flink", "monitoring", {}, FLINK, 9249),
    Flow("Prometheus scrapes the stream job's workers", "monitoring", {}, FLINK, 9470),
    Flow("Prometheus scrapes ClickHouse", "monitoring", {}, {"app": "clickhouse"}, 9363),
    Flow("Prometheus scrapes the trainer", "monitoring", {}, {"app": "pilake-train"}, 9490),
    Flow("Prometheus scrapes the trainer's loaders", "monitoring", {}, {"app": "pilake-train"}, 9480),
    Flow(
        "verify pushes its figures", "pilake", {"app": "pilake-verify"}, {"app": "pilake-pushgateway"}, 9091
    ),
    Flow("Prometheus scrapes the Pushgateway", "monitoring", {}, {"app": "pilake-pushgateway"}, 9091),
]
# Denied: nothing but the flows above reaches these (a robot or any pod of another namespace).
DENIED = [
    Flow("a pod of another namespace reads the catalog", "default", {}, {"app": "clickhouse"}, 8123),
    Flow("a pod of another namespace calls the JobManager", "default", {}, FLINK, 8081),
    Flow("the stream job reaches the trainer", "pilake", FLINK, {"app": "pilake-train"}, 29500),
    Flow("the stream job pushes to the Pushgateway", "pilake", FLINK, {"app": "pilake-pushgateway"}, 9091),
    Flow("a pod of another namespace pushes", "default", {}, {"app": "pilake-pushgateway"}, 9091),
]


def _peer_allows(peer: Obj, policy_ns: str, flow: Flow) -> bool:
    if "ipBlock" in peer:
        return False  # pods are not addressed by IP blocks here
    ns_selector = peer.get("namespaceSelector")
    if ns_selector is None:
        if flow.src_namespace != policy_ns:
            return False
    elif not _matches(ns_selector, {"kubernetes.io/metadata.name": flow.src_namespace}):
        return False
    return _matches(peer.get("podSelector", {}) or {}, flow.src_labels)


def _port_allows(ports: list[Obj] | None, port: int) -> bool:
    if not ports:
        return True
    for p in ports:
        if isinstance(p.get("port"), str):
            raise ValueError(f"named NetworkPolicy ports are not evaluated by this policy: {p}")
        low = p.get("port")
        if low is None:
            return True
        if int(low) <= port <= int(p.get("endPort") or low):
            return True
    return False


def allowed(objects: list[Obj], flow: Flow) -> bool:
    """Whether the NetworkPolicies of the destination namespace let `flow` in (ingress only)."""
    policies = [
        p
        for p in objects
        if p["kind"] == "NetworkPolicy"
        and p["metadata"].get("namespace", "") == flow.dst_namespace
        and "Ingress" in p["spec"].get("policyTypes", ["Ingress"])
        and _matches(p["spec"].get("podSelector", {}) or {}, flow.dst_labels)
    ]
    if not policies:
        return True
    for p in policies:
        for rule in p["spec"].get("ingress", []) or []:
            peers = rule.get("from")
            from_ok = not peers or any(_peer_allows(peer, flow.dst_namespace, flow) for peer in peers)
            if from_ok and _port_allows(rule.get("ports"), flow.port):
                return True
    return False


def network_violations(objects: list[Obj]) -> list[str]:
    """Namespaces without a default-deny ingress policy; needed flows denied; stray flows allowed."""
    out = []
    namespaces = {o["metadata"].get("namespace") for o in objects if o["metadata"].get("namespace")}
    for ns in sorted(namespaces):
        deny = [
            p
            for p in objects
            if p["kind"] == "NetworkPolicy"
            and p["metadata"].get("namespace") == ns
            and not (p["spec"].get("podSelector") or {}).get("matchLabels")
            and "Ingress" in p["spec"].get("policyTypes", [])
            and not p["spec"].get("ingress")
        ]
        if not deny:
            out.append(f"namespace {ns}: no default-deny ingress NetworkPolicy")
    for flow in FLOWS:
        if not allowed(objects, flow):
            out.append(
                f"needed flow denied: {flow.why} "
                f"({flow.src_namespace} {flow.src_labels} -> {flow.dst_labels}:{flow.port})"
            )
    for flow in DENIED:
        if allowed(objects, flow):
            out.append(f"flow allowed that nothing needs: {flow.why}")
    return out


def all_violations(objects: list[Obj]) -> list[str]:
    """Every rule's violations, in order."""
    return (
        security_violations(objects)
        + resource_violations(objects)
        + cronjob_violations(objects)
        + pdb_violations(objects)
        + network_violations(objects)
    )
