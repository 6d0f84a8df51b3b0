"""Session fixtures: real services start once per test session (house style 11)."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

# names the tests after which confluent-kafka clients were left running (a report, fails nothing)
pytest_plugins = ["tests.fixtures.kafka_leaks"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def stack_settings(tmp_path_factory: pytest.TempPathFactory):  # -> pi_jobs.settings.Settings
    """Settings of an isolated installation: its own home, lake, catalog and broker port."""
    from pi_jobs.settings import Settings

    home: Path = tmp_path_factory.mktemp("pilake-home")
    port = _free_port()
    return Settings(home=home, broker_port=port, bootstrap_servers=f"127.0.0.1:{port}")


@pytest.fixture(scope="session")
def broker(stack_settings) -> Iterator[str]:
    """A real Tansu broker on loopback for the whole session; yields bootstrap servers."""
    from pi_jobs.local.stack import ensure_topics, start_broker, stop_broker

    start_broker(stack_settings)
    ensure_topics(stack_settings.bootstrap_servers)
    try:
        yield stack_settings.bootstrap_servers
    finally:
        stop_broker(stack_settings)


@pytest.fixture(scope="session")
def seaweed(tmp_path_factory: pytest.TempPathFactory):  # -> tests.fixtures.seaweedfs.SeaweedS3
    """A real S3 server (SeaweedFS) for the whole session; tests write under their own prefix."""
    from tests.fixtures.seaweedfs import seaweedfs

    with seaweedfs(tmp_path_factory.mktemp("seaweedfs"), s3_port=_free_port()) as server:
        yield server
