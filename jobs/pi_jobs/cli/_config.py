"""`pilake config show`: every effective setting, secrets redacted, and where each came from."""

from __future__ import annotations

import argparse
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pi_jobs.config import FILE_SUFFIX, KAFKA_CONFIG_ENV, REDACTED, Resolution, is_kafka_secret
from pi_jobs.settings import HOME_ENV, SETTINGS_KEYS, Settings, resolve_settings

# user:password@ in a URL or host list (a DSN or bootstrap list written with credentials)
_USERINFO = re.compile(r"(^|://|,)[^/@\s,]+@")


@dataclass(frozen=True, slots=True)
class ConfigRow:
    """One line of `pilake config show`: key, shown value, source, environment variable."""

    key: str
    value: str
    source: str
    env: str


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return _USERINFO.sub(rf"\1{REDACTED}@", str(value))


def _default_source(key: str, settings: Settings) -> str:
    # defaults derived from other settings say so, so a surprising value can be traced
    derived = {
        "kafka.bootstrap_servers": "default (the local broker: 127.0.0.1:<kafka.broker_port>)",
        "lake.uri": f"default (<home>/lake, home {settings.home})",
        "catalog.dsn": f"default (<home>/catalog, home {settings.home})",
    }
    return derived.get(key, "default")


def config_rows(settings: Settings, found: Resolution, environ: Mapping[str, str]) -> list[ConfigRow]:
    """The rows of `pilake config show`: the home, every key of `SETTINGS_KEYS`, then every Kafka
    security option. Secret values (and URL credentials) are replaced by `***`; unset secrets
    show as empty.

    Example:
        >>> settings, found = resolve_settings()
        >>> config_rows(settings, found, os.environ)[1]
        ConfigRow(key='kafka.bootstrap_servers', value='127.0.0.1:19092', source='default (...)', ...)
    """
    home_source = f"env {HOME_ENV}" if HOME_ENV in environ else "default (./.pilake)"
    rows = [ConfigRow("home", str(settings.home), home_source, HOME_ENV)]
    for spec in SETTINGS_KEYS:
        value = getattr(settings, spec.field)
        shown = (REDACTED if value else "") if spec.secret else _text(value)
        source = found.sources[spec.key]
        if source == "default":
            source = _default_source(spec.key, settings)
        env = f"{spec.env} | {spec.env}{FILE_SUFFIX}" if spec.secret else spec.env
        rows.append(ConfigRow(spec.key, shown, source, env))
    properties = environ.get(KAFKA_CONFIG_ENV) or str(settings.home / "kafka.properties")
    for option in sorted(settings.kafka.options):
        value = settings.kafka.options[option]
        shown = REDACTED if is_kafka_secret(option) else _text(value)
        source = found.kafka_sources.get(option, f"file {Path(properties).absolute()}")
        env = "PILAKE_KAFKA_" + option.upper().replace(".", "_")
        rows.append(ConfigRow(f"kafka.security.{option}", shown, source, env))
    return rows


def _cmd_show(settings: Settings, args: argparse.Namespace) -> int:
    # Resolve again rather than trusting `settings`: the sources are only known here.
    settings, found = resolve_settings()
    rows = config_rows(settings, found, os.environ)
    file_text = (
        str(found.config_file)
        if found.config_file
        else "none (looked for $PILAKE_CONFIG, ./pilake.toml, <home>/pilake.toml)"
    )
    if args.json:
        doc = {
            "config_file": str(found.config_file) if found.config_file else None,
            "settings": [{"key": r.key, "value": r.value, "source": r.source, "env": r.env} for r in rows],
        }
        print(json.dumps(doc, indent=2))
        return 0
    print(f"settings file: {file_text}")
    width_key = max(len(r.key) for r in rows)
    width_value = min(48, max(len(r.value) for r in rows))
    for r in rows:
        print(f"{r.key:<{width_key}}  {r.value:<{width_value}}  {r.source}  [{r.env}]")
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register this group's commands on the `pilake` parser."""
    p = sub.add_parser("config", help="the effective configuration (settings file + environment)")
    config_sub = p.add_subparsers(dest="config_command", required=True)
    show = config_sub.add_parser(
        "show", help="print every effective setting, secrets redacted, and where each came from"
    )
    show.add_argument("--json", action="store_true", help="as JSON (key, value, source, env)")
    # no export into the environment: it would turn `VAR_FILE` sources into `VAR` ones here, and
    # this command starts no process and opens no catalog
    show.set_defaults(func=_cmd_show, export_environment=False)
