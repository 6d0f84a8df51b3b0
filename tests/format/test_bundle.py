"""Episode bundle files: length-prefixed wire chunks of one episode."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pi_format import ProtocolError, QuarantineReason
from pi_format.wire import BUNDLE_SUFFIX, encode_episode, read_bundle, write_bundle
from pi_format.wire.bundle import BUNDLE_MAGIC

from tests.strategies import episodes


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(messages=st.lists(st.binary(max_size=300), max_size=6))
def test_round_trip_arbitrary_messages(tmp_path: Path, messages: list[bytes]) -> None:
    path = write_bundle(tmp_path / f"x{BUNDLE_SUFFIX}", messages)
    assert read_bundle(path) == messages
    assert not list(tmp_path.glob("*.tmp"))  # the temp file was renamed away


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ep=episodes(max_steps=4))
def test_round_trip_episode(tmp_path: Path, ep: object) -> None:
    messages = encode_episode(ep, payload_bytes=64)  # type: ignore[arg-type]
    path = write_bundle(str(tmp_path / "e.piep"), messages)
    assert path == tmp_path / "e.piep"
    assert read_bundle(path) == messages
    data = path.read_bytes()
    assert data.startswith(BUNDLE_MAGIC)
    assert len(data) == len(BUNDLE_MAGIC) + 4 + sum(4 + len(m) for m in messages)


def test_overwrite_replaces(tmp_path: Path) -> None:
    path = tmp_path / "e.piep"
    write_bundle(path, [b"a" * 100])
    write_bundle(path, [b"b"])
    assert read_bundle(path) == [b"b"]


def test_truncated_file(tmp_path: Path) -> None:
    path = write_bundle(tmp_path / "e.piep", [b"x" * 50, b"y" * 50])
    data = path.read_bytes()
    for cut in range(len(BUNDLE_MAGIC), len(data)):
        path.write_bytes(data[:cut])
        with pytest.raises(ProtocolError, match="is truncated") as info:
            read_bundle(path)
        assert info.value.reason is QuarantineReason.TRUNCATED


@pytest.mark.parametrize("content", [b"", b"PIBUND", b"NOTABUNDLE\x00\x00\x00\x00"])
def test_bad_magic(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "e.piep"
    path.write_bytes(content)
    with pytest.raises(ProtocolError, match="is not a pi-lake episode bundle") as info:
        read_bundle(path)
    assert info.value.reason is QuarantineReason.BAD_MAGIC


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_bundle(tmp_path / "nope.piep")
