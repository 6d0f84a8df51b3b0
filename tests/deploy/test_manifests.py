"""The deploy manifests parse, have the structure their operators expect, and use only names the
code reads: topics (pi_format.topics), settings keys and variables (pi_jobs.settings.SETTINGS_KEYS),
S3 variables (pi_loader's storage options), connector jars (pi_jobs.stream.connector_jars), the
Flink version (the apache-flink pin), the stream job's entry and the CLI's commands. Renaming
one of those in the code makes a test here fail.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from pi_format.topics import ACK_TOPIC, RAW_TOPIC, RAW_TOPIC_PARTITIONS
from pi_format.wire import MAX_CHUNK_BYTES
from pi_jobs import kafka_security
from pi_jobs.cli import build_parser
from pi_jobs.config import CONFIG_ENV, FILE_SUFFIX, KAFKA_CONFIG_ENV
from pi_jobs.settings import HOME_ENV, SETTINGS_KEYS, Settings, resolve_settings
from pi_jobs.stream import connector_jars
from pi_loader._storage import _S3_KEYS, _S3_WRITER_KEYS

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"
COMPOSE = DEPLOY / "compose" / "compose.yaml"
DOCKERFILE = DEPLOY / "Dockerfile"
LAUNCHER = DEPLOY / "job" / "launch_stream_job.py"
# deploy/grafana/ belongs to the metrics work and has its own test
OWN_FILES = [p for p in DEPLOY.rglob("*") if p.is_file() and "grafana" not in p.relative_to(DEPLOY).parts]

API_VERSIONS = {
    "Kafka": "kafka.strimzi.io/v1",
    "KafkaNodePool": "kafka.strimzi.io/v1",
    "KafkaTopic": "kafka.strimzi.io/v1",
    "FlinkDeployment": "flink.apache.org/v1beta1",
    "ConfigMap": "v1",
    "Secret": "v1",
    "Service": "v1",
    "Namespace": "v1",
    "StatefulSet": "apps/v1",
    "CronJob": "batch/v1",
    "Kustomization": "kustomize.config.k8s.io/v1beta1",
}


# ---- what the code reads -------------------------------------------------------------------


def _flink_version() -> str:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    pins = [
        d for d in pyproject["project"]["optional-dependencies"]["jobs"] if d.startswith("apache-flink==")
    ]
    assert len(pins) == 1, pins
    return pins[0].split("==")[1]


def _allowed_pilake_variable(name: str) -> bool:
    names = {k.env for k in SETTINGS_KEYS} | {HOME_ENV, CONFIG_ENV, KAFKA_CONFIG_ENV}
    names |= {k.env + FILE_SUFFIX for k in SETTINGS_KEYS if k.secret}
    if name in names:
        return True
    if name.startswith(kafka_security.ENV_PREFIX):  # PILAKE_KAFKA_<librdkafka key>[_FILE]
        key = name.removeprefix(kafka_security.ENV_PREFIX).removesuffix(FILE_SUFFIX).lower().replace("_", ".")
        try:
            kafka_security._check_key(key, name)
        except kafka_security.KafkaSecurityError:
            return False
        return True
    return False


def _allowed_aws_variable(name: str) -> bool:
    base = name.removesuffix(FILE_SUFFIX) if name.endswith(FILE_SUFFIX) else name
    return base in _S3_KEYS or base in _S3_WRITER_KEYS or base in {k.env for k in SETTINGS_KEYS}


def _cli_commands() -> set[str]:
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    return set(sub.choices)  # type: ignore[arg-type]


# ---- the files -------------------------------------------------------------------------------


def _yaml_docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def _k8s_docs() -> list[tuple[Path, dict[str, Any]]]:
    return [(p, d) for p in sorted(K8S.glob("*.yaml")) for d in _yaml_docs(p)]


def _one(kind: str, name: str | None = None) -> dict[str, Any]:
    found = [
        d for _, d in _k8s_docs() if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)
    ]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def _configmap_toml() -> dict[str, Any]:
    return tomllib.loads(_one("ConfigMap", "pilake-config")["data"]["pilake.toml"])


def _compose() -> dict[str, Any]:
    doc = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(doc, dict)
    return doc


def _compose_toml() -> dict[str, Any]:
    return tomllib.loads((COMPOSE.parent / "pilake.toml").read_text())


def _dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    lines: list[tuple[str, str]] = []
    pending = ""
    for raw in DOCKERFILE.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        pending = f"{pending} {line}" if pending else line
        if pending.endswith("\\"):
            pending = pending[:-1].rstrip()
            continue
        instruction, _, rest = pending.partition(" ")
        lines.append((instruction.upper(), rest.strip()))
        pending = ""
    assert not pending, "the Dockerfile ends inside a continued line"
    return lines


def _docker_env() -> dict[str, str]:
    env: dict[str, str] = {}
    for instruction, rest in _dockerfile():
        if instruction == "ENV":
            for name, value in re.findall(r"(\w+)=(\S+)", rest):
                env[name] = value
    return env


def _docker_args() -> dict[str, str]:
    return dict(
        re.findall(r"^(\w+)=(\S+)$", rest)[0] for ins, rest in _dockerfile() if ins == "ARG" and "=" in rest
    )


def _resolve_toml(tmp_path: Path, table_text: str) -> tuple[Settings, Any]:
    path = tmp_path / "pilake.toml"
    path.write_text(table_text)
    return resolve_settings({HOME_ENV: str(tmp_path / "home"), CONFIG_ENV: str(path)}, cwd=tmp_path)


def _walk(node: Any) -> Iterator[Any]:
    yield node
    if isinstance(node, dict):
        for value in node.values():
            yield from _walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from _walk(value)


# ---- every file parses -----------------------------------------------------------------------


def test_every_manifest_parses() -> None:
    kinds = {".yaml": 0, ".toml": 0, "Dockerfile": 0}
    for path in OWN_FILES:
        if path.suffix in (".yaml", ".yml"):
            assert _yaml_docs(path), f"{path} holds no YAML document"
            kinds[".yaml"] += 1
        elif path.suffix == ".toml":
            tomllib.loads(path.read_text())
            kinds[".toml"] += 1
        elif path.name == "Dockerfile":
            assert _dockerfile()[0][0] in ("ARG", "FROM")
            kinds["Dockerfile"] += 1
    assert kinds[".yaml"] >= 8 and kinds[".toml"] >= 2 and kinds["Dockerfile"] == 1, kinds
    tomllib.loads(_one("ConfigMap", "pilake-config")["data"]["pilake.toml"])


def test_every_variable_named_anywhere_in_deploy_is_one_the_code_reads() -> None:
    for path in OWN_FILES:
        text = path.read_text()
        for match in re.finditer(r"\bPILAKE_[A-Z0-9_]*[A-Z0-9]", text):
            name = match.group()
            if text[match.end() : match.end() + 2] == "_<":  # prose: PILAKE_KAFKA_<KEY>
                continue
            assert _allowed_pilake_variable(name), (
                f"{path.relative_to(ROOT)} names {name}, which no code reads"
            )
        for name in set(re.findall(r"\bAWS_[A-Z0-9_]*[A-Z0-9]", text)):
            assert _allowed_aws_variable(name), f"{path.relative_to(ROOT)} names {name}, which no code reads"


# ---- settings files --------------------------------------------------------------------------


def test_settings_files_resolve_with_known_keys_and_no_secrets(tmp_path: Path) -> None:
    for text in (
        (DEPLOY / "pilake.example.toml").read_text(),
        (COMPOSE.parent / "pilake.toml").read_text(),
        _one("ConfigMap", "pilake-config")["data"]["pilake.toml"],
    ):
        settings, found = _resolve_toml(tmp_path, text)  # unknown keys and secrets raise
        assert settings.lake_root.startswith("s3://")
        assert settings.flink_checkpoint_dir.startswith("s3://")
        assert found.config_file is not None


def test_the_example_documents_every_key_with_its_variable_and_default(tmp_path: Path) -> None:
    text = (DEPLOY / "pilake.example.toml").read_text()
    # uncomment `# key = value` lines: the commented keys must be real too
    uncommented = re.sub(r"(?m)^#\s*(\"?[\w.]+\"?\s+=\s)", r"\1", text)
    doc = tomllib.loads(uncommented)
    flat = _flat(doc)
    defaults = Settings(home=tmp_path)
    commented = set(re.findall(r"(?m)^#\s*(\w+)\s+=\s", text))
    for spec in SETTINGS_KEYS:
        if spec.secret:
            assert spec.env in text and f"{spec.env}{FILE_SUFFIX}" in text, spec
            continue
        assert spec.key in flat, f"deploy/pilake.example.toml does not document {spec.key}"
        assert spec.env in text, f"deploy/pilake.example.toml does not name {spec.env}"
        name = spec.key.rsplit(".", 1)[1]
        if name in commented and spec.key not in ("stream.robots",):
            # a commented key shows its default, so the example cannot drift from the code
            assert flat[spec.key] == getattr(defaults, spec.field), spec.key
    security = tomllib.loads(uncommented)["kafka"]["security"]
    for option in security:
        kafka_security._check_key(option, "deploy/pilake.example.toml")


# ---- Kubernetes ------------------------------------------------------------------------------


def test_k8s_kinds_api_versions_and_kustomization() -> None:
    docs = _k8s_docs()
    for path, doc in docs:
        assert doc.get("kind") in API_VERSIONS, f"{path.name}: unexpected kind {doc.get('kind')}"
        assert doc["apiVersion"] == API_VERSIONS[doc["kind"]], f"{path.name}: {doc['kind']}"
        if doc["kind"] != "Kustomization":
            assert doc["metadata"]["name"], path
    kustomization = _one("Kustomization")
    assert sorted(kustomization["resources"]) == sorted(
        p.name for p in K8S.glob("*.yaml") if p.name != "kustomization.yaml"
    )
    assert {d["kind"] for _, d in docs} >= {
        "Kafka", "KafkaNodePool", "KafkaTopic", "FlinkDeployment", "ConfigMap", "Secret", "StatefulSet",
    }  # fmt: skip


def test_strimzi_kafka_is_kraft_with_node_pools_and_the_protocol_topics() -> None:
    kafka = _one("Kafka")
    cluster = kafka["metadata"]["name"]
    assert "zookeeper" not in kafka["spec"]
    assert int(kafka["spec"]["kafka"]["config"]["message.max.bytes"]) > MAX_CHUNK_BYTES
    pools = [d for _, d in _k8s_docs() if d["kind"] == "KafkaNodePool"]
    assert {role for p in pools for role in p["spec"]["roles"]} == {"controller", "broker"}
    for pool in pools:
        assert pool["metadata"]["labels"]["strimzi.io/cluster"] == cluster
        assert pool["spec"]["replicas"] >= 1 and pool["spec"]["storage"]["type"]
    topics = {d["metadata"]["name"]: d for _, d in _k8s_docs() if d["kind"] == "KafkaTopic"}
    assert set(topics) == {RAW_TOPIC, ACK_TOPIC}
    for topic in topics.values():
        assert topic["metadata"]["labels"]["strimzi.io/cluster"] == cluster
    assert topics[RAW_TOPIC]["spec"]["partitions"] >= RAW_TOPIC_PARTITIONS
    assert int(topics[RAW_TOPIC]["spec"]["config"]["max.message.bytes"]) > MAX_CHUNK_BYTES


def test_k8s_settings_point_at_the_services_the_manifests_create() -> None:
    toml = _configmap_toml()
    kafka = _one("Kafka")
    plain = next(lst for lst in kafka["spec"]["kafka"]["listeners"] if not lst["tls"])
    assert (
        toml["kafka"]["bootstrap_servers"] == f"{kafka['metadata']['name']}-kafka-bootstrap:{plain['port']}"
    )
    dsn = urlsplit(toml["catalog"]["dsn"])
    service = _one("Service", dsn.hostname)
    assert dsn.port in [p["port"] for p in service["spec"]["ports"]]
    statefulset = _one("StatefulSet", dsn.hostname)
    container = statefulset["spec"]["template"]["spec"]["containers"][0]
    assert {e["name"]: e.get("value") for e in container["env"]}["CLICKHOUSE_DB"] == dsn.path.strip("/")


def test_flink_deployment_runs_the_stream_job_entry_from_the_image() -> None:
    deployment = _one("FlinkDeployment")
    spec = deployment["spec"]
    version = _flink_version()
    major, minor = version.split(".")[:2]
    assert spec["flinkVersion"] == f"v{major}_{minor}"
    job = spec["job"]
    assert job["entryClass"] == "org.apache.flink.client.python.PythonDriver"
    assert job["jarURI"] == f"local:///opt/flink/opt/flink-python-{version}.jar"
    args = job["args"]
    python = args[args.index("-pyclientexec") + 1]
    entry = args[args.index("-py") + 1]
    copies = {
        rest.split()[-1]: rest.split()[0]
        for ins, rest in _dockerfile()
        if ins == "COPY" and "--from" not in rest and len(rest.split()) == 2
    }
    assert entry in copies and (ROOT / copies[entry]) == LAUNCHER
    runs = " ".join(rest for ins, rest in _dockerfile() if ins == "RUN")
    assert f"uv venv --seed --python ${{PYTHON_VERSION}} {python.removesuffix('/bin/python')}" in runs
    # the job's parallelism comes from the settings; the operator's must agree
    toml = _configmap_toml()
    assert job["parallelism"] == toml["stream"]["parallelism"]
    assert int(spec["flinkConfiguration"]["taskmanager.numberOfTaskSlots"]) >= 1
    assert spec["flinkConfiguration"]["execution.checkpointing.dir"] == toml["flink"]["checkpoint_dir"]
    assert toml["flink"]["checkpoint_dir"].startswith("s3://")


def test_flink_pods_get_the_settings_file_config_maps_and_secrets_that_exist() -> None:
    spec = _one("FlinkDeployment")["spec"]
    pod = spec["podTemplate"]["spec"]
    container = next(c for c in pod["containers"] if c["name"] == "flink-main-container")
    env = {e["name"]: e for e in container["env"]}
    mount = next(m for m in container["volumeMounts"] if m["name"] == "pilake-config")
    volume = next(v for v in pod["volumes"] if v["name"] == "pilake-config")
    config_map = _one("ConfigMap", volume["configMap"]["name"])
    config_path = Path(env[CONFIG_ENV]["value"])
    assert config_path.parent == Path(mount["mountPath"]) and config_path.name in config_map["data"]
    secret = _one("Secret", "pilake-credentials")
    for e in container["env"]:
        assert _allowed_pilake_variable(e["name"]) or _allowed_aws_variable(e["name"]), e["name"]
        ref = e.get("valueFrom", {}).get("secretKeyRef")
        if ref:
            assert ref["name"] == secret["metadata"]["name"] and ref["key"] in secret["stringData"]
    for source in container["envFrom"]:
        data = _one("ConfigMap", source["configMapRef"]["name"])["data"]
        for name in data:
            assert _allowed_pilake_variable(name) or _allowed_aws_variable(name), name
    # the Python workers read these from their environment, not from a settings file
    exported = {k.env for k in SETTINGS_KEYS if k.export}
    given = set(env) | {
        n for s in container["envFrom"] for n in _one("ConfigMap", s["configMapRef"]["name"])["data"]
    }
    assert {"PILAKE_CLICKHOUSE_USER", "PILAKE_CLICKHOUSE_PASSWORD", "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY"} <= given & exported  # fmt: skip
    for name in given & exported:
        key = next(k for k in SETTINGS_KEYS if k.env == name)
        assert key.key not in _flat(_configmap_toml()), f"{key.key} is set twice (pilake.toml and env)"
    # secrets live in the Secret, never in a ConfigMap
    for name in given - set(env):
        assert not any(k.secret and k.env == name for k in SETTINGS_KEYS), name


def test_maintenance_cronjob_runs_compact_then_gc_one_at_a_time_with_the_job_settings() -> None:
    cron = _one("CronJob", "pilake-maintenance")
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"
    pod = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    script = " ".join(container["args"])
    assert script.index("pilake compact") < script.index("pilake gc") and "&&" in script
    flink = _one("FlinkDeployment")["spec"]["podTemplate"]["spec"]["containers"][0]
    assert container["env"] == flink["env"] and container["envFrom"] == flink["envFrom"]
    assert container["image"] == _one("FlinkDeployment")["spec"]["image"]
    assert pod["volumes"] == _one("FlinkDeployment")["spec"]["podTemplate"]["spec"]["volumes"]
    from pi_jobs.cli import build_parser

    for command in ("compact", "gc --retention-hours 24"):
        build_parser().parse_args(command.split())  # the CLI has these commands and flags


def _flat(doc: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in doc.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def test_the_launcher_builds_the_job_config_from_the_k8s_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = importlib.util.spec_from_file_location("launch_stream_job", LAUNCHER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    path = tmp_path / "pilake.toml"
    path.write_text(_one("ConfigMap", "pilake-config")["data"]["pilake.toml"])
    secret = tmp_path / "s3-secret"
    secret.write_text("not-a-real-key\n")
    environ = {
        HOME_ENV: str(tmp_path / "home"),
        CONFIG_ENV: str(path),
        "AWS_SECRET_ACCESS_KEY_FILE": str(secret),
    }
    monkeypatch.setattr(os, "environ", environ)  # the launcher exports into os.environ
    config = module.job_config()
    toml = _configmap_toml()
    assert config.lake_root == toml["lake"]["uri"]
    assert config.bootstrap_servers == toml["kafka"]["bootstrap_servers"]
    assert config.catalog_path == toml["catalog"]["dsn"]
    assert config.parallelism == toml["stream"]["parallelism"]
    assert config.checkpoint_dir == toml["flink"]["checkpoint_dir"]
    assert environ["AWS_SECRET_ACCESS_KEY"] == "not-a-real-key"  # for deltalake in the client
    # it calls the job builder the embedded driver uses
    tree = ast.parse(LAUNCHER.read_text())
    imported = {(n.module, a.name) for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
    assert ("pi_jobs.stream.job", "build_job") in imported
    for module_name, name in imported:
        if module_name and module_name.startswith("pi_"):
            assert hasattr(importlib.import_module(module_name), name), (module_name, name)


# ---- Docker image ----------------------------------------------------------------------------


def test_dockerfile_pins_what_the_code_pins() -> None:
    lines = _dockerfile()
    args = _docker_args()
    version = _flink_version()
    base = args["FLINK_IMAGE"]
    assert base.startswith(f"flink:{version}-") and "java17" in base
    assert any(ins == "FROM" and rest == "${FLINK_IMAGE}" for ins, rest in lines)
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert f">={args['PYTHON_VERSION']}" in requires
    labels = " ".join(rest for ins, rest in lines if ins == "LABEL")
    assert f'org.pilake.connector-wheel="{connector_jars.CONNECTOR_WHEEL}"' in labels
    assert f'org.pilake.flink-version="{version}"' in labels
    env = _docker_env()
    assert env["ENABLE_BUILT_IN_PLUGINS"] == f"flink-s3-fs-presto-{version}.jar"
    runs = " ".join(rest for ins, rest in lines if ins == "RUN")
    assert '".[jobs]"' in runs
    assert "jobs" in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    # the jars are fetched by the code's own function, into the jar dir the settings derive
    jar_dir = Settings(home=Path(env[HOME_ENV])).jar_dir
    assert f"ensure_connector_jars(Path('{jar_dir}'))" in runs
    assert callable(connector_jars.ensure_connector_jars)
    for ins, rest in lines:
        if ins == "COPY" and "--from" not in rest:
            for src in rest.split()[:-1]:
                assert (ROOT / src).exists(), f"COPY {src}: no such path in the repository"


# ---- compose ---------------------------------------------------------------------------------


def test_compose_has_the_services_and_kraft_kafka() -> None:
    services = _compose()["services"]
    assert set(services) >= {"kafka", "kafka-topics", "jobmanager", "taskmanager", "clickhouse", "minio",
                             "minio-init", "stream"}  # fmt: skip
    kafka_env = services["kafka"]["environment"]
    assert "controller" in kafka_env["KAFKA_PROCESS_ROLES"] and "broker" in kafka_env["KAFKA_PROCESS_ROLES"]
    assert not any("zookeeper" in name.lower() for name in services)
    assert int(kafka_env["KAFKA_MESSAGE_MAX_BYTES"]) > MAX_CHUNK_BYTES
    create = " ".join(services["kafka-topics"]["command"])
    created = dict(re.findall(r"--topic (\S+) --partitions (\d+)", create))
    assert set(created) == {RAW_TOPIC, ACK_TOPIC}
    assert int(created[RAW_TOPIC]) == RAW_TOPIC_PARTITIONS
    for name in ("jobmanager", "taskmanager", "stream"):
        assert services[name]["build"]["dockerfile"] == "deploy/Dockerfile", name
        assert (COMPOSE.parent / services[name]["build"]["context"]).resolve() == ROOT
    assert services["jobmanager"]["command"] == "jobmanager"
    assert services["taskmanager"]["command"] == "taskmanager"


def test_compose_settings_point_at_its_services_and_the_cli_it_runs(tmp_path: Path) -> None:
    services = _compose()["services"]
    toml = _compose_toml()

    def published(service: str) -> set[int]:
        return {int(p.split(":")[-1]) for p in services[service].get("ports", [])}

    bootstrap = toml["kafka"]["bootstrap_servers"]
    assert f"PLAINTEXT://{bootstrap}" in services["kafka"]["environment"]["KAFKA_ADVERTISED_LISTENERS"]
    dsn = urlsplit(toml["catalog"]["dsn"])
    assert dsn.hostname == "clickhouse" and dsn.port in published("clickhouse")
    assert services["clickhouse"]["environment"]["CLICKHOUSE_DB"] == dsn.path.strip("/")
    rest = urlsplit(toml["flink"]["rest_url"])
    assert rest.hostname == "jobmanager" and rest.port in published("jobmanager")
    endpoint = urlsplit(toml["s3"]["endpoint"])
    assert endpoint.hostname == "minio" and endpoint.port in published("minio")
    bucket = urlsplit(toml["lake"]["uri"]).netloc
    assert f"pilake/{bucket}" in " ".join(services["minio-init"]["command"])
    assert urlsplit(toml["flink"]["checkpoint_dir"]).netloc == bucket
    slots = re.search(
        r"taskmanager.numberOfTaskSlots: (\d+)", services["taskmanager"]["environment"]["FLINK_PROPERTIES"]
    )
    assert slots and int(slots.group(1)) >= toml["stream"]["parallelism"]
    # the stream service runs a real pilake command with its settings file mounted
    stream = services["stream"]
    argv = stream["command"]
    assert stream["entrypoint"] == ["pilake"] and argv[0] in _cli_commands()
    assert callable(build_parser().parse_args(argv).func)
    mount = next(v for v in stream["volumes"] if v.startswith("./pilake.toml:"))
    assert mount.split(":")[1] == stream["environment"][CONFIG_ENV]
    # every variable given to the job image's containers is one the code reads
    for name in ("jobmanager", "taskmanager", "stream"):
        for var in services[name]["environment"]:
            if var.startswith(("PILAKE_", "AWS_")):
                assert _allowed_pilake_variable(var) or _allowed_aws_variable(var), (name, var)
    # ${VAR} substitutions are all in the secrets template
    template = (COMPOSE.parent / "secrets.env.example").read_text()
    for var in set(re.findall(r"\$\{(\w+)", COMPOSE.read_text())):
        assert re.search(rf"(?m)^{var}=", template), f"{var} is missing from secrets.env.example"
    assert (COMPOSE.parent / ".gitignore").read_text().split() == ["secrets.env"]


# ---- README ----------------------------------------------------------------------------------


def test_readme_commands_and_files_exist() -> None:
    text = (DEPLOY / "README.md").read_text()
    commands = _cli_commands()
    code = " ".join(re.findall(r"```.*?```|`[^`]+`", text, flags=re.S))  # commands are in code
    for command in set(re.findall(r"\bpilake ([a-z][a-z-]*)", code)):
        assert command in commands, f"deploy/README.md uses `pilake {command}`, which the CLI lacks"
    for ref in set(re.findall(r"`(deploy/[\w./-]+)`", text)):
        assert (ROOT / ref).exists(), f"deploy/README.md names {ref}, which does not exist"
