"""One configuration: the settings file (TOML) plus environment overrides, over a table of keys.

Where it sits: below `pi_jobs.settings`, which declares the table (`SETTINGS_KEYS`: config key,
environment variable, Settings field, secret?) and builds `Settings` from what `resolve` returns.
Every process of an installation (the CLI, the stream job's driver, the demo) resolves the same
way, so one file drives the local stack and the cluster.

Sources, later ones win:
1. the key's default (the `Settings` field default);
2. the settings file: `$PILAKE_CONFIG` (must exist), else `./pilake.toml`, else
   `<PILAKE_HOME>/pilake.toml`; keys are dotted TOML paths (`[lake] uri = ...` is `lake.uri`);
3. the environment variable of the key, or for secrets also `<VAR>_FILE` naming a file that holds
   the value (Docker/Kubernetes secrets); setting both is an error.

Secrets (passwords, S3 keys) are refused in the settings file: it is usually checked in or
mounted from a ConfigMap. Kafka security options keep their own sources (`pi_jobs.kafka_security`):
kafka.properties, then the settings file's `[kafka.security]` table (non-secret options only),
then PILAKE_KAFKA_<KEY> variables; `PILAKE_KAFKA_<KEY>_FILE` works for their secrets too.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pi_jobs.errors import PiJobsError

CONFIG_ENV = "PILAKE_CONFIG"
CONFIG_NAME = "pilake.toml"
FILE_SUFFIX = "_FILE"
KAFKA_SECURITY_TABLE = "kafka.security"
# pi_jobs.kafka_security's ENV_PREFIX and CONFIG_ENV (tests check they agree)
_KAFKA_ENV_PREFIX = "PILAKE_KAFKA_"
KAFKA_CONFIG_ENV = "PILAKE_KAFKA_CONFIG"
# librdkafka security keys whose values are credentials or key material
_KAFKA_SECRET_MARKERS = ("password", "secret", ".pem", "jaas")
REDACTED = "***"


class ConfigError(PiJobsError, ValueError):
    """The settings file or an environment variable is malformed; the message names the key,
    the source and what to do (never a secret's value)."""


@dataclass(frozen=True, slots=True)
class ConfigKey:
    """One setting: its dotted key in the file, its environment variable, the Settings field.

    Args:
        key: dotted TOML path, e.g. "lake.uri" (`[lake]` table, `uri` key).
        env: the environment variable that overrides it.
        field: the `Settings` field it sets.
        parse: str -> value for the environment's text (int, str, `parse_bool`); a file value of
            the wrong TOML type is an error.
        secret: never read from the settings file; redacted when shown.
        export: also put the effective value into the process environment (`export_environment`)
            because code outside pi_jobs reads it from there (pi_catalog, deltalake's S3 client),
            as do the processes the CLI starts.

    Example:
        >>> ConfigKey("lake.uri", "PILAKE_LAKE", "lake_root")
        ConfigKey(key='lake.uri', env='PILAKE_LAKE', field='lake_root', ...)
    """

    key: str
    env: str
    field: str
    parse: Callable[[str], Any] = str
    secret: bool = False
    export: bool = False

    def __post_init__(self) -> None:
        if not self.key or self.key.startswith(".") or self.key.endswith("."):
            raise ValueError(f"key must be a dotted name like 'lake.uri', got {self.key!r}")
        if not self.env.isupper() or " " in self.env:
            raise ValueError(f"env must be an upper-case variable name, got {self.env!r}")


def parse_bool(text: str) -> bool:
    """'true'/'1'/'yes'/'on' or 'false'/'0'/'no'/'off'/'' (any case; '' as deltalake reads it)."""
    lowered = text.strip().lower()
    if lowered in ("true", "1", "yes", "on"):
        return True
    if lowered in ("false", "0", "no", "off", ""):
        return False
    raise ValueError(f"expected true or false, got {text!r}")


def parse_first_port(text: str) -> int:
    """A port ("9480"), or the first of a range ("9480-9487", as pi_loader reads its own
    PILAKE_LOADER_METRICS_PORT); "0" is 0 (off).

    Example:
        >>> parse_first_port("9480-9487")
        9480
    """
    first, sep, last = text.strip().partition("-")
    port = int(first)
    if sep and not port <= int(last) <= 65535:
        raise ValueError(f"expected a port or a range 'first-last' with first <= last, got {text!r}")
    return port


@dataclass(frozen=True, slots=True)
class Resolution:
    """What `resolve` found: the field values the file or the environment set, and where every
    key came from.

    `sources` maps each key to "default", "file <path>", "env <VAR>" or "env <VAR>_FILE (<path>)";
    `kafka_sources` does the same for the Kafka security options the file or the environment set
    (those only in kafka.properties have none). `kafka_security` is the environment to give
    `KafkaSecurity.from_sources`.
    """

    values: Mapping[str, Any]
    sources: Mapping[str, str]
    config_file: Path | None
    kafka_security: Mapping[str, str] = field(default_factory=dict)
    kafka_sources: Mapping[str, str] = field(default_factory=dict)


def find_config_file(environ: Mapping[str, str], home: Path, cwd: Path | None = None) -> Path | None:
    """$PILAKE_CONFIG, else ./pilake.toml, else <home>/pilake.toml, else None.

    Raises:
        ConfigError: $PILAKE_CONFIG names no file.
    """
    named = environ.get(CONFIG_ENV)
    if named:
        path = Path(named)
        if not path.is_file():
            raise ConfigError(
                f"{CONFIG_ENV}={named!r} is not a file; point it at a pilake.toml "
                "(deploy/pilake.example.toml is a template) or unset it"
            )
        return path.absolute()
    for candidate in ((cwd or Path.cwd()) / CONFIG_NAME, home / CONFIG_NAME):
        if candidate.is_file():
            return candidate.absolute()
    return None


def _flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in table.items():
        key = f"{prefix}{name}"
        if key == KAFKA_SECURITY_TABLE:
            out[key] = value  # librdkafka option names contain dots: keep the table whole
        elif isinstance(value, dict):
            out.update(_flatten(value, f"{key}."))
        else:
            out[key] = value
    return out


def read_config_file(path: Path) -> dict[str, Any]:
    """The file's keys, flattened to dotted names (the `[kafka.security]` table kept whole)."""
    try:
        with path.open("rb") as fh:
            return _flatten(tomllib.load(fh))
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{path} is not valid TOML: {err}; fix the line it names") from err
    except OSError as err:
        raise ConfigError(f"cannot read the settings file {path}: {err}") from err


def _file_value(spec: ConfigKey, value: Any, path: Path) -> Any:
    """Check a TOML value's type against what the key's parser produces."""
    if spec.parse is int or spec.parse is parse_first_port:
        ok = isinstance(value, int) and not isinstance(value, bool)
        want = "an integer"
    elif spec.parse is parse_bool:
        ok, want = isinstance(value, bool), "true or false"
    else:
        ok, want = isinstance(value, str), "a string"
    if not ok:
        raise ConfigError(f"{path}: {spec.key} must be {want}, got {value!r} ({type(value).__name__})")
    return value


def secret_from_environment(var: str, environ: Mapping[str, str]) -> tuple[str, str] | None:
    """(value, source) of a secret from `VAR` or the file named by `VAR_FILE`, or None.

    The file's trailing newline is dropped (`echo pw > file` writes one).

    Raises:
        ConfigError: both are set, or the file cannot be read.

    Example:
        >>> secret_from_environment("PILAKE_CLICKHOUSE_PASSWORD",
        ...                         {"PILAKE_CLICKHOUSE_PASSWORD_FILE": "/run/secrets/ch"})
        ('s3cret', 'env PILAKE_CLICKHOUSE_PASSWORD_FILE (/run/secrets/ch)')
    """
    file_var = var + FILE_SUFFIX
    if var in environ and file_var in environ:
        raise ConfigError(f"both {var} and {file_var} are set; set only one of them")
    if file_var in environ:
        path = Path(environ[file_var])
        try:
            text = path.read_text()
        except OSError as err:
            raise ConfigError(
                f"{file_var}={str(path)!r}: cannot read the secret file ({err.strerror}); "
                "mount the secret there or unset the variable"
            ) from err
        return text.rstrip("\r\n"), f"env {file_var} ({path})"
    if var in environ:
        return environ[var], f"env {var}"
    return None


def is_kafka_secret(option: str) -> bool:
    """Whether a librdkafka security option holds a credential or key material."""
    return any(marker in option for marker in _KAFKA_SECRET_MARKERS)


def _kafka_env_name(option: str) -> str:
    return _KAFKA_ENV_PREFIX + option.upper().replace(".", "_")


def _kafka_option(var: str) -> str:
    return var.removeprefix(_KAFKA_ENV_PREFIX).lower().replace("_", ".")


def _kafka_security(
    table: Any, path: Path | None, environ: Mapping[str, str]
) -> tuple[dict[str, str], dict[str, str]]:
    """The environment `KafkaSecurity.from_sources` should read (the file's options as
    PILAKE_KAFKA_* variables beneath the real ones, `_FILE` secrets read), and each option's source.
    Options only in kafka.properties keep no source here (`pilake config show` names that file)."""
    env: dict[str, str] = {}
    sources: dict[str, str] = {}
    if table is not None:
        if not isinstance(table, dict):
            raise ConfigError(f'{path}: [{KAFKA_SECURITY_TABLE}] must be a table of option = "value"')
        for option, value in table.items():
            if is_kafka_secret(option):
                raise ConfigError(
                    f"{path}: {KAFKA_SECURITY_TABLE}.{option} is a secret and must not be written in "
                    f"the settings file; set {_kafka_env_name(option)} or "
                    f"{_kafka_env_name(option)}{FILE_SUFFIX} (a file holding it) instead"
                )
            if not isinstance(value, str):
                raise ConfigError(f"{path}: {KAFKA_SECURITY_TABLE}.{option} must be a string, got {value!r}")
            env[_kafka_env_name(option)] = value
            sources[option] = f"file {path}"
    for name, value in environ.items():
        if not name.startswith(_KAFKA_ENV_PREFIX) or name == KAFKA_CONFIG_ENV:
            env[name] = value
            continue
        var = name.removesuffix(FILE_SUFFIX)
        found = secret_from_environment(var, environ)
        if found is not None:  # VAR, or VAR_FILE read into VAR
            env[var], sources[_kafka_option(var)] = found
    return env, sources


def resolve(
    keys: Sequence[ConfigKey],
    environ: Mapping[str, str],
    home: Path,
    *,
    cwd: Path | None = None,
) -> Resolution:
    """Read the settings file and the environment for every key of `keys`.

    Args:
        keys: the key table (`pi_jobs.settings.SETTINGS_KEYS`).
        environ: the environment (os.environ at the edge, a dict in tests).
        home: the installation's home (where `<home>/pilake.toml` is looked for).
        cwd: where `./pilake.toml` is looked for (default: the working directory).

    Returns:
        The values that differ from the defaults (by Settings field), their sources, the file
        used, and the environment for `KafkaSecurity.from_sources` (`kafka_security`).

    Raises:
        ConfigError: an unknown key or a secret in the file, a value of the wrong type, an
            unparsable environment variable, or an unreadable `_FILE`.

    Example:
        >>> r = resolve(SETTINGS_KEYS, {"PILAKE_LAKE": "s3://b/lake"}, Path(".pilake"))
        >>> r.values["lake_root"], r.sources["lake.uri"]
        ('s3://b/lake', 'env PILAKE_LAKE')
    """
    path = find_config_file(environ, home, cwd)
    table = read_config_file(path) if path is not None else {}
    known = {k.key: k for k in keys}
    unknown = sorted(set(table) - set(known) - {KAFKA_SECURITY_TABLE})
    if unknown:
        raise ConfigError(
            f"{path}: unknown key(s) {unknown}; known keys are {sorted([*known, KAFKA_SECURITY_TABLE])} "
            "(`pilake config show` lists them with their environment variables)"
        )
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for spec in keys:
        sources[spec.key] = "default"
        if spec.key in table:
            if spec.secret:
                raise ConfigError(
                    f"{path}: {spec.key} is a secret and must not be written in the settings file; "
                    f"set {spec.env} or {spec.env}{FILE_SUFFIX} (a file holding it) instead"
                )
            values[spec.field] = _file_value(spec, table[spec.key], path)  # type: ignore[arg-type]
            sources[spec.key] = f"file {path}"
        found = (
            secret_from_environment(spec.env, environ)
            if spec.secret
            else ((environ[spec.env], f"env {spec.env}") if spec.env in environ else None)
        )
        if found is not None:
            text, source = found
            try:
                values[spec.field] = spec.parse(text)
            except ValueError as err:
                kind = {
                    int: "an integer",
                    parse_bool: "true or false",
                    parse_first_port: "a port or a range 'first-last'",
                }.get(spec.parse, "valid")
                raise ConfigError(f"{spec.env} must be {kind}, got {text!r} ({err})") from err
            sources[spec.key] = source
    kafka_env, kafka_sources = _kafka_security(table.get(KAFKA_SECURITY_TABLE), path, environ)
    return Resolution(
        values=values,
        sources=sources,
        config_file=path,
        kafka_security=kafka_env,
        kafka_sources=kafka_sources,
    )


def export_environment(
    keys: Sequence[ConfigKey], settings: Any, environ: dict[str, str] | os._Environ[str] | None = None
) -> list[str]:
    """Put the effective value of every `export` key into the environment (non-empty values
    only), so pi_catalog, deltalake's S3 client and the processes the CLI starts (the Flink
    workers) read what the settings file said. Returns the variable names set.

    Example:
        >>> export_environment(SETTINGS_KEYS, settings)
        ['PILAKE_CLICKHOUSE_USER']
    """
    env = os.environ if environ is None else environ
    done = []
    for spec in keys:
        if not spec.export:
            continue
        value = getattr(settings, spec.field)
        if value is None or value is False or value == "":
            continue  # a default: leave the environment (and the SDKs' own defaults) alone
        env[spec.env] = ("true" if value else "false") if isinstance(value, bool) else str(value)
        env.pop(spec.env + FILE_SUFFIX, None)  # the value is now in VAR; both set is an error
        done.append(spec.env)
    return done
