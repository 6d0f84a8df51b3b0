"""A chunk read again skips its page-header parse (pi_loader.reading._known_pages) but never its
CRC: bytes damaged after the first read are refused exactly as on a first read, and the good
chunks beside them still read."""

from __future__ import annotations

import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pi_loader import CorruptDataError, Dataset, PiLoaderError, SampleSpec
from pi_loader.reading._chunk_index import OFFSET, SIZE, page_value
from pi_loader.reading._known_pages import KnownPages

from tests.fixtures.lake_factory import CHUNK_FRAMES, write_lake

CAMERAS = ("front", "wrist")
STEPS = 9


def _page(value: bytes) -> bytes:
    """A one-value PLAIN v1 data page with its CRC, as the lake writes a video chunk."""
    body = len(value).to_bytes(4, "little") + value
    crc = zlib.crc32(body)
    signed = crc - (1 << 32) if crc >= 1 << 31 else crc

    def field(v: int) -> bytes:
        z, out = (v << 1) ^ (v >> 63), bytearray()
        while True:
            byte, z = z & 0x7F, z >> 7
            out.append(byte | (0x80 if z else 0))
            if not z:
                return b"\x15" + bytes(out)

    return field(0) + field(len(body)) + field(len(body)) + field(signed) + b"\x00" + body


def test_known_page_equals_page_value_and_parses_once() -> None:
    pages = KnownPages()
    raw = _page(b"\x00\x00\x01\x65chunk bytes" * 50)
    assert pages.value("k", raw, "f.parquet", 3) == page_value(raw, "f.parquet", 3)
    assert pages.value("k", raw, "f.parquet", 3) == page_value(raw, "f.parquet", 3)
    assert pages.parses == 1


def test_any_flipped_byte_after_the_first_read_is_refused_or_equal() -> None:
    """Seeded: every single-byte change of a page known to the memo is refused with the same error
    page_value gives (or, for a change page_value accepts, gives page_value's value)."""
    rng = np.random.default_rng(7)
    good = _page(bytes(rng.integers(0, 256, 400, dtype=np.uint8)))
    pages = KnownPages()
    pages.value("k", good, "f.parquet", 1)
    for position in range(len(good)):
        bad = bytearray(good)
        bad[position] ^= int(rng.integers(1, 256))
        try:
            want: Any = page_value(bytes(bad), "f.parquet", 1)
        except CorruptDataError as err:
            want = err
        if isinstance(want, CorruptDataError):
            with pytest.raises(CorruptDataError) as got:
                pages.value("k", bytes(bad), "f.parquet", 1)
            assert str(got.value) == str(want)
        else:
            assert pages.value("k", bytes(bad), "f.parquet", 1) == want
        assert pages.value("k", good, "f.parquet", 1) == page_value(good, "f.parquet", 1)
    # a truncated or empty read of a known chunk
    for bad_bytes in (good[:-1], good[:5], b""):
        with pytest.raises(CorruptDataError):
            pages.value("k", bad_bytes, "f.parquet", 1)


def test_known_pages_are_bounded() -> None:
    pages = KnownPages(capacity=2)
    raw = _page(b"abc")
    for key in range(5):
        pages.value(key, raw, "f", 0)
    assert len(pages) == 2
    with pytest.raises(ValueError, match="capacity"):
        KnownPages(capacity=0)


def test_a_chunk_damaged_after_its_first_read_is_refused_and_its_neighbours_read(tmp_path: Path) -> None:
    lake = write_lake(
        tmp_path / "lake", episodes=2, steps=STEPS, cameras=CAMERAS, size=(32, 32), garbage_attempt=False
    )
    ds = Dataset(lake.layout, spec=SampleSpec(cameras=CAMERAS, action_horizon=2), seed=3, chunk_cache_size=1)
    video = ds._gather.video
    first = video.frame(0, 0, CHUNK_FRAMES).copy()  # chunk 1 of camera "front" of episode 0: known now
    neighbour = video.frame(0, 1, 0).copy()  # another chunk: the cache of one forgets chunk 1
    assert video._pages.parses == 2
    np.testing.assert_array_equal(video.frame(0, 0, CHUNK_FRAMES), first)  # read again, no parse
    video.frame(0, 1, 0)
    assert video._pages.parses == 2

    index = video._chunk_index
    assert index is not None
    (path,) = sorted(Path(lake.layout.table("video")).glob("*.parquet"))
    (uri,) = video._locators.video_files
    local = video._reader.local_path(uri, table="video", version=video._version)
    assert Path(local).resolve() == path.resolve()
    entries = np.asarray(index.entries(video._reader, uri, local))  # this file's index, not another lake's
    group = 1
    offset, size = int(entries[group, OFFSET]), int(entries[group, SIZE])
    data = bytearray(path.read_bytes())
    for where in (offset + size - 1, offset + size // 2, offset):  # a pixel byte, the middle, the header
        damaged = bytearray(data)
        damaged[where] ^= 0xFF
        path.write_bytes(bytes(damaged))
        with pytest.raises(CorruptDataError, match=rf"{path.name}, row group {group}"):
            video.frame(0, 0, CHUNK_FRAMES)
        np.testing.assert_array_equal(video.frame(0, 1, 0), neighbour)  # the good chunk beside it
    path.write_bytes(bytes(data))
    np.testing.assert_array_equal(video.frame(0, 0, CHUNK_FRAMES), first)


def test_a_frame_past_a_known_chunk_is_refused_as_on_a_first_read(tmp_path: Path) -> None:
    lake = write_lake(
        tmp_path / "lake", episodes=1, steps=STEPS, cameras=CAMERAS, size=(32, 32), garbage_attempt=False
    )
    last = (STEPS - 1) // CHUNK_FRAMES  # the camera's last chunk, shorter than CHUNK_FRAMES
    past = STEPS  # a frame number in that chunk's span that no chunk holds
    assert past // CHUNK_FRAMES == last

    def refusal(ds: Dataset) -> str:
        with pytest.raises(PiLoaderError, match="no chunk holds it") as err:
            ds._gather.video.frame(0, 0, past)
        return str(err.value)

    fresh = Dataset(lake.layout, spec=SampleSpec(cameras=CAMERAS, action_horizon=2), seed=3)
    first_read = refusal(fresh)
    ds = Dataset(lake.layout, spec=SampleSpec(cameras=CAMERAS, action_horizon=2), seed=3, chunk_cache_size=1)
    ds._gather.video.frame(0, 0, STEPS - 1)  # the last chunk read and known
    ds._gather.video.frame(0, 1, 0)  # forgotten by the chunk cache of one
    assert ds._gather.video._pages.entry((0, 0, last)) is not None
    assert refusal(ds) == first_read
