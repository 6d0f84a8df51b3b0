"""One configuration: settings file + environment, secrets, sources, `pilake config show`."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest
from pi_jobs import kafka_security
from pi_jobs.cli import main
from pi_jobs.config import KAFKA_CONFIG_ENV, ConfigError, export_environment, find_config_file
from pi_jobs.settings import SETTINGS_KEYS, Settings, resolve_settings
from pi_jobs.stream.config import stream_config

SECRET = "hunter2-do-not-print"

FILE = """
[kafka]
bootstrap_servers = "kafka-0:9092,kafka-1:9092"

[kafka.security]
"security.protocol" = "SASL_SSL"
"sasl.mechanism" = "SCRAM-SHA-512"
"sasl.username" = "pilake"

[lake]
uri = "s3://pilake/lake"

[catalog]
dsn = "http://clickhouse:8123/pilake"
user = "pilake"

[stream]
parallelism = 2

[flink]
rest_url = "http://flink:8081"
checkpoint_dir = "s3://pilake/flink/checkpoints"

[s3]
endpoint = "http://minio:9000"
allow_http = true
"""


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {"PILAKE_HOME": str(tmp_path / "home"), **extra}


def test_the_file_sets_values_and_names_itself_as_their_source(tmp_path: Path) -> None:
    path = _write(tmp_path / "conf" / "pilake.toml", FILE)
    settings, found = resolve_settings(_env(tmp_path, PILAKE_CONFIG=str(path)), cwd=tmp_path)
    assert settings.bootstrap_servers == "kafka-0:9092,kafka-1:9092"
    assert (settings.lake_root, settings.catalog_path) == (
        "s3://pilake/lake",
        "http://clickhouse:8123/pilake",
    )
    assert (settings.parallelism, settings.clickhouse_user) == (2, "pilake")
    assert (settings.s3_endpoint, settings.s3_allow_http) == ("http://minio:9000", True)
    assert dict(settings.kafka.options) == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "pilake",
    }
    assert found.config_file == path
    assert found.sources["lake.uri"] == f"file {path}"
    assert found.sources["kafka.broker_port"] == "default"
    assert found.kafka_sources["sasl.username"] == f"file {path}"
    # the stream job is configured from the same settings
    assert stream_config(settings).parallelism == 2
    assert stream_config(settings).lake_root == "s3://pilake/lake"
    assert stream_config(settings).checkpoint_dir == "s3://pilake/flink/checkpoints"
    assert settings.flink_rest_url == "http://flink:8081"


def test_environment_overrides_the_file(tmp_path: Path) -> None:
    path = _write(tmp_path / "pilake.toml", FILE)
    env = _env(
        tmp_path,
        PILAKE_CONFIG=str(path),
        PILAKE_LAKE="/data/lake",
        PILAKE_PARALLELISM="3",
        PILAKE_KAFKA_SASL_USERNAME="robot",
    )
    settings, found = resolve_settings(env, cwd=tmp_path)
    assert (settings.lake_root, settings.parallelism) == ("/data/lake", 3)
    assert found.sources["lake.uri"] == "env PILAKE_LAKE"
    assert found.sources["stream.parallelism"] == "env PILAKE_PARALLELISM"
    assert settings.catalog_path == "http://clickhouse:8123/pilake"  # not overridden: still the file's
    assert settings.kafka.options["sasl.username"] == "robot"
    assert found.kafka_sources["sasl.username"] == "env PILAKE_KAFKA_SASL_USERNAME"


def test_file_lookup_order_config_env_then_cwd_then_home(tmp_path: Path) -> None:
    home, cwd = tmp_path / "home", tmp_path / "cwd"
    in_home = _write(home / "pilake.toml", '[lake]\nuri = "/from/home"\n')
    cwd.mkdir()
    assert resolve_settings(_env(tmp_path), cwd=cwd)[0].lake_root == "/from/home"
    in_cwd = _write(cwd / "pilake.toml", '[lake]\nuri = "/from/cwd"\n')
    settings, found = resolve_settings(_env(tmp_path), cwd=cwd)
    assert (settings.lake_root, found.config_file) == ("/from/cwd", in_cwd)
    named = _write(tmp_path / "named.toml", '[lake]\nuri = "/from/named"\n')
    settings, found = resolve_settings(_env(tmp_path, PILAKE_CONFIG=str(named)), cwd=cwd)
    assert (settings.lake_root, found.config_file) == ("/from/named", named)
    assert in_home.is_file()
    with pytest.raises(ConfigError, match=r"PILAKE_CONFIG='.*nope.toml' is not a file"):
        find_config_file({"PILAKE_CONFIG": str(tmp_path / "nope.toml")}, home, cwd)


def test_defaults_without_a_file_are_the_old_ones(tmp_path: Path) -> None:
    settings, found = resolve_settings(_env(tmp_path, PILAKE_BROKER_PORT="20001"), cwd=tmp_path)
    assert found.config_file is None
    assert settings.bootstrap_servers == "127.0.0.1:20001"  # follows the local broker's port
    assert settings.lake_root == str(tmp_path / "home" / "lake")
    assert settings.parallelism == 1 and not settings.kafka


@pytest.mark.parametrize(
    ("text", "key", "variable"),
    [
        (f'[catalog]\npassword = "{SECRET}"\n', "catalog.password", "PILAKE_CLICKHOUSE_PASSWORD"),
        (f'[s3]\nsecret_access_key = "{SECRET}"\n', "s3.secret_access_key", "AWS_SECRET_ACCESS_KEY"),
        (
            f'[kafka.security]\n"sasl.password" = "{SECRET}"\n',
            "kafka.security.sasl.password",
            "PILAKE_KAFKA_SASL_PASSWORD",
        ),
    ],
)
def test_a_secret_in_the_file_is_refused(tmp_path: Path, text: str, key: str, variable: str) -> None:
    path = _write(tmp_path / "pilake.toml", text)
    with pytest.raises(
        ConfigError,
        match=rf"{key} is a secret and must not be written in the settings file; "
        rf"set {variable} or {variable}_FILE",
    ) as info:
        resolve_settings(_env(tmp_path, PILAKE_CONFIG=str(path)), cwd=tmp_path)
    assert SECRET not in str(info.value)


def test_secrets_come_from_file_variables(tmp_path: Path) -> None:
    ch = _write(tmp_path / "secrets" / "ch", SECRET + "\n")  # `echo pw > file` leaves a newline
    sasl = _write(tmp_path / "secrets" / "sasl", "sasl-" + SECRET)
    env = _env(
        tmp_path,
        PILAKE_CLICKHOUSE_PASSWORD_FILE=str(ch),
        PILAKE_KAFKA_SASL_PASSWORD_FILE=str(sasl),
        AWS_SECRET_ACCESS_KEY="aws-" + SECRET,
    )
    settings, found = resolve_settings(env, cwd=tmp_path)
    assert settings.clickhouse_password == SECRET
    assert found.sources["catalog.password"] == f"env PILAKE_CLICKHOUSE_PASSWORD_FILE ({ch})"
    assert settings.kafka.options["sasl.password"] == "sasl-" + SECRET
    assert found.kafka_sources["sasl.password"] == f"env PILAKE_KAFKA_SASL_PASSWORD_FILE ({sasl})"
    assert settings.s3_secret_access_key == "aws-" + SECRET
    assert SECRET not in repr(settings)
    with pytest.raises(
        ConfigError, match="both PILAKE_CLICKHOUSE_PASSWORD and PILAKE_CLICKHOUSE_PASSWORD_FILE"
    ):
        resolve_settings({**env, "PILAKE_CLICKHOUSE_PASSWORD": "x"}, cwd=tmp_path)
    with pytest.raises(ConfigError, match=r"PILAKE_CLICKHOUSE_PASSWORD_FILE='.*missing': cannot read"):
        resolve_settings({**env, "PILAKE_CLICKHOUSE_PASSWORD_FILE": str(tmp_path / "missing")}, cwd=tmp_path)


def test_malformed_files_and_variables_are_named(tmp_path: Path) -> None:
    path = tmp_path / "pilake.toml"
    env = _env(tmp_path, PILAKE_CONFIG=str(path))
    _write(path, '[lake]\nurl = "/typo"\n')
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['lake.url'\]; known keys are .*'lake.uri'"):
        resolve_settings(env, cwd=tmp_path)
    _write(path, '[stream]\nparallelism = "2"\n')
    with pytest.raises(ConfigError, match=r"stream.parallelism must be an integer, got '2' \(str\)"):
        resolve_settings(env, cwd=tmp_path)
    _write(path, "[lake\n")
    with pytest.raises(ConfigError, match="is not valid TOML"):
        resolve_settings(env, cwd=tmp_path)
    path.unlink()  # (it would also be found as ./pilake.toml)
    with pytest.raises(ConfigError, match="PILAKE_PARALLELISM must be an integer, got 'two'"):
        resolve_settings(_env(tmp_path, PILAKE_PARALLELISM="two"), cwd=tmp_path)
    with pytest.raises(ConfigError, match="AWS_ALLOW_HTTP must be true or false, got 'maybe'"):
        resolve_settings(_env(tmp_path, AWS_ALLOW_HTTP="maybe"), cwd=tmp_path)
    assert resolve_settings(_env(tmp_path, AWS_ALLOW_HTTP=""), cwd=tmp_path)[0].s3_allow_http is False
    with pytest.raises(ValueError, match=r"parallelism must be in \[1, 64\], got 0"):
        resolve_settings(_env(tmp_path, PILAKE_PARALLELISM="0"), cwd=tmp_path)


def test_every_key_sets_a_field_and_external_names_match_their_readers() -> None:
    fields = {f.name for f in dataclasses.fields(Settings)}
    assert len({k.key for k in SETTINGS_KEYS}) == len(SETTINGS_KEYS)
    assert len({k.env for k in SETTINGS_KEYS}) == len(SETTINGS_KEYS)
    for spec in SETTINGS_KEYS:
        assert spec.field in fields, spec
    by_field = {k.field: k for k in SETTINGS_KEYS}
    # pi_catalog reads its server credentials from these variables; the CLI exports them
    from pi_catalog._connection import PASSWORD_ENV, USER_ENV

    assert (by_field["clickhouse_user"].env, by_field["clickhouse_password"].env) == (USER_ENV, PASSWORD_ENV)
    assert by_field["clickhouse_password"].secret and by_field["clickhouse_password"].export
    assert (kafka_security.ENV_PREFIX, kafka_security.CONFIG_ENV) == ("PILAKE_KAFKA_", KAFKA_CONFIG_ENV)


def test_export_puts_file_values_where_other_packages_read_them(tmp_path: Path) -> None:
    path = _write(tmp_path / "pilake.toml", FILE)
    ch = _write(tmp_path / "ch", SECRET)
    env = _env(tmp_path, PILAKE_CONFIG=str(path), PILAKE_CLICKHOUSE_PASSWORD_FILE=str(ch))
    settings = Settings.from_env(env)
    exported = export_environment(SETTINGS_KEYS, settings, env)
    assert sorted(exported) == [
        "AWS_ALLOW_HTTP",
        "AWS_ENDPOINT_URL",
        "PILAKE_CLICKHOUSE_PASSWORD",
        "PILAKE_CLICKHOUSE_USER",
    ]
    assert env["PILAKE_CLICKHOUSE_PASSWORD"] == SECRET and "PILAKE_CLICKHOUSE_PASSWORD_FILE" not in env
    assert (env["AWS_ENDPOINT_URL"], env["AWS_ALLOW_HTTP"]) == ("http://minio:9000", "true")
    assert "AWS_REGION" not in env  # defaults are left to the SDKs
    assert Settings.from_env(env) == settings  # exporting changes nothing for a child process


def test_config_show_prints_every_value_redacted_with_its_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path / "pilake.toml", FILE)
    ch = _write(tmp_path / "ch", SECRET)
    # main exports settings into os.environ: give it a copy that the test then drops
    monkeypatch.setattr(
        os,
        "environ",
        {
            "PATH": os.environ.get("PATH", ""),
            "PILAKE_HOME": str(tmp_path / "home"),
            "PILAKE_CONFIG": str(path),
            "PILAKE_LAKE": "s3://other/lake",
            "PILAKE_CLICKHOUSE_PASSWORD_FILE": str(ch),
            "PILAKE_KAFKA_SASL_PASSWORD": "sasl-" + SECRET,
            "PILAKE_BOOTSTRAP": "user:pw-in-url@kafka:9092",
        },
    )
    monkeypatch.chdir(tmp_path)
    assert main(["config", "show"]) == 0
    out = capsys.readouterr().out
    assert SECRET not in out and "pw-in-url" not in out
    assert out.splitlines()[0] == f"settings file: {path}"
    lines = {line.split()[0]: line for line in out.splitlines()[1:]}
    assert set(lines) >= {"home", *(k.key for k in SETTINGS_KEYS), "kafka.security.sasl.password"}
    assert "s3://other/lake" in lines["lake.uri"] and "env PILAKE_LAKE" in lines["lake.uri"]
    assert "http://clickhouse:8123/pilake" in lines["catalog.dsn"] and f"file {path}" in lines["catalog.dsn"]
    assert "***" in lines["catalog.password"]
    assert f"env PILAKE_CLICKHOUSE_PASSWORD_FILE ({ch})" in lines["catalog.password"]
    assert "***" in lines["kafka.security.sasl.password"]
    assert "env PILAKE_KAFKA_SASL_PASSWORD" in lines["kafka.security.sasl.password"]
    assert "SCRAM-SHA-512" in lines["kafka.security.sasl.mechanism"]
    assert "***@kafka:9092" in lines["kafka.bootstrap_servers"]
    assert "default" in lines["kafka.broker_port"]

    assert main(["config", "show", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    rows = {row["key"]: row for row in doc["settings"]}
    assert doc["config_file"] == str(path)
    assert rows["stream.parallelism"] == {
        "key": "stream.parallelism",
        "value": "2",
        "source": f"file {path}",
        "env": "PILAKE_PARALLELISM",
    }
    assert rows["catalog.password"]["value"] == "***"


def test_config_show_reports_a_bad_file_as_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path / "pilake.toml", f'[catalog]\npassword = "{SECRET}"\n')
    monkeypatch.setattr(os, "environ", {"PILAKE_HOME": str(tmp_path / "home"), "PILAKE_CONFIG": str(path)})
    assert main(["config", "show"]) == 1
    err = capsys.readouterr().err
    assert "catalog.password is a secret" in err and SECRET not in err


def test_main_exports_file_values_for_the_commands_it_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path / "pilake.toml", '[catalog]\nuser = "ch-user"\n[s3]\nregion = "eu-west-1"\n')
    env = {"PILAKE_HOME": str(tmp_path / "home"), "PILAKE_CONFIG": str(path), "PILAKE_BROKER_PORT": "1"}
    monkeypatch.setattr(os, "environ", env)
    assert main(["status"]) == 1  # nothing listens on port 1; the settings were still applied
    assert (env["PILAKE_CLICKHOUSE_USER"], env["AWS_REGION"]) == ("ch-user", "eu-west-1")
    assert "broker is not running" in capsys.readouterr().out


def test_kafka_security_order_properties_then_file_then_environment(tmp_path: Path) -> None:
    props = _write(tmp_path / "kafka.properties", "sasl.mechanism=PLAIN\nssl.ca.location=/ca.pem\n")
    path = _write(
        tmp_path / "pilake.toml",
        '[kafka.security]\n"sasl.mechanism" = "SCRAM-SHA-256"\n"sasl.username" = "from-file"\n',
    )
    env = _env(
        tmp_path,
        PILAKE_CONFIG=str(path),
        PILAKE_KAFKA_CONFIG=str(props),
        PILAKE_KAFKA_SASL_USERNAME="from-env",
    )
    settings, found = resolve_settings(env, cwd=tmp_path)
    assert dict(settings.kafka.options) == {
        "ssl.ca.location": "/ca.pem",  # only in kafka.properties
        "sasl.mechanism": "SCRAM-SHA-256",  # the settings file overrides kafka.properties
        "sasl.username": "from-env",  # the environment overrides both
    }
    assert found.kafka_sources["sasl.mechanism"] == f"file {path}"
    assert "ssl.ca.location" not in found.kafka_sources  # `config show` names the properties file
