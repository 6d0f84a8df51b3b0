from __future__ import annotations

from pathlib import Path

import pytest
from pi_jobs.settings import DEFAULT_BROKER_PORT, Settings


def test_defaults_live_under_home(tmp_path: Path) -> None:
    s = Settings.from_env({"PILAKE_HOME": str(tmp_path)})
    assert s.home == tmp_path
    assert s.broker_port == DEFAULT_BROKER_PORT
    assert s.bootstrap_servers == f"127.0.0.1:{DEFAULT_BROKER_PORT}"
    assert s.lake_root == str(tmp_path / "lake")
    assert s.catalog_path == str(tmp_path / "catalog")


def test_environment_overrides(tmp_path: Path) -> None:
    s = Settings.from_env(
        {
            "PILAKE_HOME": str(tmp_path),
            "PILAKE_BROKER_PORT": "20001",
            "PILAKE_LAKE": "/data/lake",
            "PILAKE_CATALOG": "https://ch:8443/pilake",
        }
    )
    assert s.bootstrap_servers == "127.0.0.1:20001"
    assert (s.lake_root, s.catalog_path) == ("/data/lake", "https://ch:8443/pilake")


def test_bad_port_is_named(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="PILAKE_BROKER_PORT must be an integer, got 'abc'"):
        Settings.from_env({"PILAKE_HOME": str(tmp_path), "PILAKE_BROKER_PORT": "abc"})
    with pytest.raises(ValueError, match=r"broker_port must be in \[1, 65535\], got 0"):
        Settings(home=tmp_path, broker_port=0)
