"""`pilake up --s3`: a local S3 server (SeaweedFS) for an s3:// lake, as a user starts it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from tests.conftest import _free_port

pytestmark = pytest.mark.integration


def _pilake(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    exe = str(Path(sys.executable).with_name("pilake"))
    return subprocess.run([exe, *args], env=env, capture_output=True, text=True, timeout=120, check=False)


def _env_file(path: Path) -> dict[str, str]:
    return dict(line.removeprefix("export ").split("=", 1) for line in path.read_text().splitlines())


def test_up_s3_serves_a_lake_that_outlives_a_restart(tmp_path: Path) -> None:
    import os

    from deltalake import DeltaTable, write_deltalake

    home, port = tmp_path / "home", _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(PILAKE_HOME=str(home), PILAKE_BROKER_PORT=str(_free_port()))
    try:
        up = _pilake(env, "up", "--s3", "--s3-port", str(port))
        assert up.returncode == 0, up.stdout + up.stderr
        assert f"S3 at http://127.0.0.1:{port} (bucket pilake)" in up.stdout
        settings = _env_file(home / "s3.env")
        assert oct((home / "s3.env").stat().st_mode & 0o777) == "0o600"  # it holds the secret key
        assert settings["AWS_ENDPOINT_URL"] == f"http://127.0.0.1:{port}"
        assert settings["AWS_CONDITIONAL_PUT"] == "etag" and "AWS_S3_ALLOW_UNSAFE_RENAME" not in settings
        assert settings["AWS_SECRET_ACCESS_KEY"] not in up.stdout + up.stderr
        status = _pilake(env, "status")
        assert "s3     : SeaweedFS pid" in status.stdout, status.stdout
        options = {k: v for k, v in settings.items() if k.startswith("AWS_")}
        table = settings["PILAKE_LAKE"] + "/t"
        write_deltalake(table, pa.table({"x": [1, 2]}), storage_options=options)
        # wrong keys are refused: the server checks signatures
        with pytest.raises(OSError, match=r"(?i)access|denied|forbidden|signature|InvalidAccessKeyId"):
            DeltaTable(table, storage_options={**options, "AWS_SECRET_ACCESS_KEY": "wrong"}).version()

        down = _pilake(env, "down")
        assert "down: S3 server stopped" in down.stdout, down.stdout + down.stderr
        up_again = _pilake(env, "up", "--s3")  # the same port (remembered) and the same keys
        assert up_again.returncode == 0, up_again.stdout + up_again.stderr
        assert _env_file(home / "s3.env") == settings
        assert DeltaTable(table, storage_options=options).to_pyarrow_table().column("x").to_pylist() == [1, 2]
    finally:
        _pilake(env, "down")
