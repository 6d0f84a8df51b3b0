from __future__ import annotations

from pathlib import Path

import pytest
from pi_jobs.cli import build_parser, main


def test_every_command_parses() -> None:
    parser = build_parser()
    for argv in (
        ["up"],
        ["down"],
        ["status"],
        ["setup"],
        ["simulate", "--robots", "2", "--episodes", "3", "--upload"],
        ["upload", "a.piep", "dir", "--wait-s", "5"],
        ["stream", "--until-idle"],
        ["sql", "SELECT 1"],
        ["catalog", "rebuild"],
        ["demo", "--robots", "1"],
    ):
        assert callable(parser.parse_args(argv).func)


def test_status_exits_non_zero_when_the_broker_is_down(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PILAKE_HOME", str(tmp_path))
    monkeypatch.setenv("PILAKE_BROKER_PORT", "1")  # nothing of ours listens on port 1
    assert main(["status"]) == 1
    assert "broker is not running" in capsys.readouterr().out


def test_user_errors_are_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("PILAKE_HOME", str(tmp_path))
    monkeypatch.setenv("PILAKE_BROKER_PORT", "not-a-port")
    assert main(["status"]) == 1
    assert "PILAKE_BROKER_PORT must be an integer" in capsys.readouterr().err
