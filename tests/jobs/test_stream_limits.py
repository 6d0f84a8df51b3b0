"""The stream job's limits (`pi_jobs.stream.limits`): validation, how they reach the job, and
the pure parts of the sink that once failed on hostile header values. The limits acting on
real messages in the real job: tests/faults/test_wire_fuzz.py."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from pi_format import RAW_SCHEMA
from pi_jobs.cli import build_parser, stream_config_from_args
from pi_jobs.settings import Settings
from pi_jobs.stream import StreamLimits
from pi_jobs.stream._records import SourceMessage, raw_rows
from pi_jobs.stream.job import config_from_json, config_to_json
from pi_jobs.stream.limits import oldest_idle


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"max_episode_bytes": 10}, "max_episode_bytes must be >= 1000000"),
        ({"max_episode_bytes": 8 << 30}, "max_held_bytes must be >= max_episode_bytes"),
        ({"max_chunks_per_episode": 1}, r"max_chunks_per_episode must be in \[2, 2147483647\]"),
        ({"max_chunks_per_episode": 2**32}, "max_chunks_per_episode must be in"),
        ({"max_held_episodes": 0}, "max_held_episodes must be >= 1, got 0"),
        ({"max_episodes_per_key": 0}, "max_episodes_per_key must be >= 1, got 0"),
    ],
)
def test_limits_are_validated(kwargs: dict[str, int], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        StreamLimits(**kwargs)


def test_defaults_are_safe() -> None:
    lim = StreamLimits()
    # a declared count of the 167-byte message of issue 31 is far over the limit
    assert lim.max_chunks_per_episode < 0xFFFFFFFF
    assert lim.max_chunks_per_episode <= 2**31 - 1  # a chunk index always fits raw.chunk_index
    assert lim.max_episode_bytes <= lim.max_held_bytes


def test_raw_rows_keep_a_message_whose_index_overflows_int32() -> None:
    # was: ArrowInvalid "Value 4294967294 too large to fit in C integer type", a crash loop
    msg = SourceMessage("t", 0, 5, 1, "e1", b"\x00" * 167)
    table = raw_rows([msg, msg], "a1", [0xFFFFFFFE, 3])
    assert table.schema == RAW_SCHEMA
    assert table.column("chunk_index").to_pylist() == [None, 3]
    assert table.column("message").to_pylist() == [msg.value, msg.value]
    assert isinstance(table, pa.Table)


def test_oldest_idle_picks_the_longest_waiting() -> None:
    assert oldest_idle([("a", 5), ("b", 2), ("c", 9)], 2) == ["b", "a"]
    assert oldest_idle([], 3) == []


def test_cli_flags_set_the_limits(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path)
    args = build_parser().parse_args(
        ["stream", "--max-episode-mb", "4", "--max-held-mb", "24", "--max-held-episodes", "40",
         "--max-chunks-per-episode", "100"]
    )  # fmt: skip
    lim = stream_config_from_args(settings, args).limits
    assert lim == StreamLimits(
        max_episode_bytes=4_000_000,
        max_held_bytes=24_000_000,
        max_held_episodes=40,
        max_chunks_per_episode=100,
    )
    default = stream_config_from_args(settings, build_parser().parse_args(["stream"]))
    assert default.limits == StreamLimits()
    bad = build_parser().parse_args(["stream", "--max-held-mb", "2", "--max-episode-mb", "4"])
    with pytest.raises(ValueError, match="max_held_bytes must be >= max_episode_bytes"):
        stream_config_from_args(settings, bad)


def test_limits_travel_with_a_submitted_job(tmp_path: Path) -> None:
    from dataclasses import replace

    settings = Settings(home=tmp_path)
    config = stream_config_from_args(settings, build_parser().parse_args(["stream"]))
    config = replace(config, limits=StreamLimits(max_held_episodes=7))
    assert config_from_json(config_to_json(config)).limits.max_held_episodes == 7
