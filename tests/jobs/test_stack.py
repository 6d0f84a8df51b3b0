"""The local stack with the real broker binary: start, health, port conflicts, stop."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from pi_jobs.errors import StackError
from pi_jobs.local.stack import broker_status, java_version, start_broker, stop_broker
from pi_jobs.settings import Settings

pytestmark = pytest.mark.integration


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_start_status_stop(tmp_path: Path) -> None:
    port = _free_port()
    settings = Settings(home=tmp_path, broker_port=port, bootstrap_servers=f"127.0.0.1:{port}")
    assert not broker_status(settings).running
    status = start_broker(settings)
    try:
        assert status.running and status.pid is not None
        assert (tmp_path / "run" / "broker.pid").read_text() == str(status.pid)
        assert start_broker(settings).pid == status.pid  # idempotent
    finally:
        assert stop_broker(settings)
    assert not broker_status(settings).running
    assert not stop_broker(settings)


def test_port_taken_by_a_stranger_is_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        settings = Settings(home=tmp_path, broker_port=port, bootstrap_servers=f"127.0.0.1:{port}")
        assert "taken by another process" in broker_status(settings).detail
        with pytest.raises(StackError, match=f"port {port} is already in use"):
            start_broker(settings)


def test_java_is_found() -> None:
    assert "version" in java_version()
