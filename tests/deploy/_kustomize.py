"""A faithful render of deploy/k8s/kustomization.yaml, limited to the kustomize features it uses.

kustomize is not installable here from PyPI or Debian, so this renders what `kubectl kustomize`
would for exactly these fields, and refuses any other (a new field in the kustomization fails
the tests until it is implemented here): `resources` (files), `namespace`, `secretGenerator`
with `envs`/`literals`, `type` and `options.disableNameSuffixHash: true`, and `replacements`
copying one field to others (source and targets by kind and name; a field path split on dots,
`\\.` escaping one, as kustomize's PathSplitter; `options.create` only). The output is compared
with `kubectl kustomize` where kubectl is installed (tests/deploy/test_k8s_schemas.py).

Example:
    >>> objects = render(Path("deploy/k8s"), files={"secrets.env": "a=1\\n"})
    >>> sorted({o["kind"] for o in objects})[:2]
    ['ConfigMap', 'CronJob']
"""

from __future__ import annotations

import base64
import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

SUPPORTED = {"apiVersion", "kind", "namespace", "resources", "secretGenerator", "replacements"}
GENERATOR_FIELDS = {"name", "type", "envs", "literals", "options"}
# kinds that take no namespace (the ones these manifests could hold)
CLUSTER_SCOPED = {"Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding"}


class KustomizeError(Exception):
    """The kustomization uses what this render does not implement, or is invalid."""


def _env_pairs(text: str, source: str) -> list[tuple[str, str]]:
    """KEY=VALUE lines as kustomize reads an env file (comments and blank lines skipped)."""
    pairs = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or not key:
            raise KustomizeError(f"{source}:{number}: not KEY=VALUE: {raw!r}")
        pairs.append((key, value))
    return pairs


def _secret(spec: dict[str, Any], base: Path, files: Mapping[str, str]) -> dict[str, Any]:
    unknown = set(spec) - GENERATOR_FIELDS
    if unknown:
        raise KustomizeError(f"secretGenerator {spec.get('name')}: unsupported fields {sorted(unknown)}")
    if spec.get("options") != {"disableNameSuffixHash": True}:
        # kustomize would append a content hash to the name and rewrite references to it in
        # built-in kinds only; the manifests rely on the plain name, so this render does too
        raise KustomizeError(f"secretGenerator {spec['name']}: only options.disableNameSuffixHash: true")
    pairs: list[tuple[str, str]] = []
    for env in spec.get("envs", []):
        text = files[env] if env in files else (base / env).read_text()
        pairs += _env_pairs(text, env)
    for literal in spec.get("literals", []):
        pairs += _env_pairs(literal, "literals")
    data: dict[str, str] = {}
    for key, value in pairs:
        if key in data:
            raise KustomizeError(f"secretGenerator {spec['name']}: key {key} given twice")
        data[key] = base64.b64encode(value.encode()).decode()
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": spec["name"]},
        "type": spec.get("type", "Opaque"),
        "data": dict(sorted(data.items())),
    }


def _path(field_path: str) -> list[str]:
    """A kustomize fieldPath as keys: split on ".", where "\\." is a dot inside a key."""
    parts: list[str] = []
    for piece in field_path.split("."):
        if parts and parts[-1].endswith("\\"):
            parts[-1] = parts[-1][:-1] + "." + piece
        else:
            parts.append(piece)
    if any(p.startswith("[") for p in parts):
        raise KustomizeError(f"fieldPath {field_path}: list selectors are not implemented here")
    return parts


def _select(objects: list[dict[str, Any]], spec: dict[str, Any], what: str) -> list[dict[str, Any]]:
    unknown = set(spec) - {"kind", "name"}
    if unknown:
        raise KustomizeError(f"replacements {what}: unsupported selector fields {sorted(unknown)}")
    found = [
        o for o in objects if o["kind"] == spec.get("kind") and o["metadata"]["name"] == spec.get("name")
    ]
    if not found:
        raise KustomizeError(f"replacements {what}: no {spec.get('kind')} {spec.get('name')}")
    return found


def _replace(objects: list[dict[str, Any]], replacement: dict[str, Any]) -> None:
    if set(replacement) != {"source", "targets"}:
        raise KustomizeError(f"replacements: only source and targets are implemented: {sorted(replacement)}")
    source = dict(replacement["source"])
    field_path = source.pop("fieldPath")
    node: Any = _select(objects, source, "source")[0]
    for key in _path(field_path):
        if not isinstance(node, dict) or key not in node:
            raise KustomizeError(f"replacements source: {field_path} is missing")
        node = node[key]
    for target in replacement["targets"]:
        if set(target) - {"select", "fieldPaths", "options"} or set(target.get("options", {})) - {"create"}:
            raise KustomizeError(f"replacements target: unsupported fields {sorted(target)}")
        create = target.get("options", {}).get("create", False)
        for obj in _select(objects, target["select"], "target"):
            for path in target["fieldPaths"]:
                *parents, last = _path(path)
                holder = obj
                for key in parents:
                    if key not in holder and not create:
                        raise KustomizeError(f"replacements target: {path} is missing")
                    holder = holder.setdefault(key, {})
                if last not in holder and not create:
                    raise KustomizeError(f"replacements target: {path} is missing")
                holder[last] = copy.deepcopy(node)


def render(directory: Path, files: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """Every object `kubectl kustomize directory` prints, in the order of the resources.

    `files` stands in for files by their path in the kustomization (the git-ignored secrets.env).
    """
    files = files or {}
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    if kustomization.get("kind") != "Kustomization" or kustomization.get("apiVersion") != (
        "kustomize.config.k8s.io/v1beta1"
    ):
        raise KustomizeError("not a kustomize.config.k8s.io/v1beta1 Kustomization")
    unknown = set(kustomization) - SUPPORTED
    if unknown:
        raise KustomizeError(f"kustomization fields this render does not implement: {sorted(unknown)}")
    objects: list[dict[str, Any]] = []
    for resource in kustomization.get("resources", []):
        path = directory / resource
        if not path.is_file():
            raise KustomizeError(f"resource {resource}: only files are supported")
        objects += [copy.deepcopy(d) for d in yaml.safe_load_all(path.read_text()) if d is not None]
    for spec in kustomization.get("secretGenerator", []):
        objects.append(_secret(spec, directory, files))
    for replacement in kustomization.get("replacements", []):
        _replace(objects, replacement)
    seen: set[tuple[str, str]] = set()
    for obj in objects:
        ident = (obj["kind"], obj["metadata"]["name"])
        if ident in seen:  # kustomize refuses two objects with one id
            raise KustomizeError(f"{ident[0]} {ident[1]} is defined twice")
        seen.add(ident)
    namespace = kustomization.get("namespace")
    if namespace:
        for obj in objects:
            if obj["kind"] not in CLUSTER_SCOPED:
                obj["metadata"]["namespace"] = namespace
    return objects
