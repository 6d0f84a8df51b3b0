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


def test_user_errors_are_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PILAKE_HOME", str(tmp_path))
    monkeypatch.setenv("PILAKE_BROKER_PORT", "not-a-port")
    assert main(["status"]) == 1
    assert "PILAKE_BROKER_PORT must be an integer" in capsys.readouterr().err


def test_stream_overrides_reach_the_job_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pi_jobs.cli import stream_config_from_args
    from pi_jobs.settings import Settings

    monkeypatch.setenv("PILAKE_HOME", str(tmp_path))
    settings = Settings.from_env()
    args = build_parser().parse_args(["stream", "--keyframe-interval", "10", "--incomplete-timeout-s", "7"])
    config = stream_config_from_args(settings, args)
    assert config.featurize.keyframe_interval == 10 and config.incomplete_timeout_s == 7.0
    default = stream_config_from_args(settings, build_parser().parse_args(["stream"]))
    assert default.featurize.keyframe_interval == 1
    with pytest.raises(ValueError, match="keyframe_interval must be >= 1 and divide chunk_frames=10"):
        stream_config_from_args(settings, build_parser().parse_args(["stream", "--keyframe-interval", "3"]))
