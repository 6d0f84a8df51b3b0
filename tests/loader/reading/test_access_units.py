"""A chunk read again is not scanned again for its access units (pi_loader.reading._video keeps
each chunk's frame boundaries per process, bounded), and gives the same pixels; access units
that do not fit the bytes are refused as a VideoError (pi_format.video.ChunkDecoder)."""

from __future__ import annotations

import numpy as np
import pytest
from pi_format.errors import VideoError
from pi_format.video import ChunkDecoder, reader
from pi_loader import Dataset
from pi_loader.reading import _video

from tests.fixtures.lake_factory import CHUNK_FRAMES, FakeLake
from tests.loader.conftest import LOADER_CAMERAS


def _count_scans(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    scans: list[int] = []
    scan = reader.access_unit_bounds

    def counting(data: bytes) -> list[tuple[int, int, bool]] | None:
        scans.append(len(data))
        return scan(data)

    monkeypatch.setattr(reader, "access_unit_bounds", counting)
    return scans


def test_a_chunk_read_again_is_not_scanned_again(
    loader_lake: FakeLake, monkeypatch: pytest.MonkeyPatch
) -> None:
    scans = _count_scans(monkeypatch)
    ds = Dataset(loader_lake.layout, seed=0, action_horizon=2, chunk_cache_size=1)
    video = ds._gather.video
    first = video.frame(0, 0, 1).copy()  # chunk 0 of episode 0's first camera
    assert len(scans) == 1
    other = video.frame(1, 0, CHUNK_FRAMES + 1)  # another chunk: the cache of one forgets chunk 0
    assert len(scans) == 2 and other.shape == first.shape
    again = video.frame(0, 0, 1)  # read again, decoded with the boundaries kept from the first read
    assert len(scans) == 2
    assert ds.read_stats["video_reads"] == 3
    np.testing.assert_array_equal(again, first)
    # and every frame of a batch equals what a process that never kept boundaries decodes
    for _ in range(2):  # the second round reads every chunk again: ds through its kept units
        got = ds.samples(np.arange(len(ds)))
    monkeypatch.setattr(_video, "ACCESS_UNIT_MEMO", 0)
    fresh = Dataset(loader_lake.layout, seed=0, action_horizon=2, chunk_cache_size=1)
    want = fresh.samples(np.arange(len(fresh)))
    for camera in LOADER_CAMERAS:
        key = f"observation.images.{camera}"
        np.testing.assert_array_equal(got[key], want[key])
    assert len(fresh._gather.video._units) == 0


def test_kept_boundaries_are_bounded(loader_lake: FakeLake, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_video, "ACCESS_UNIT_MEMO", 3)
    ds = Dataset(loader_lake.layout, seed=0, action_horizon=2, chunk_cache_size=1)
    ds.samples(np.arange(len(ds)))
    assert ds.read_stats["video_reads"] > 3
    assert len(ds._gather.video._units) == 3


def _chunk_bytes(loader_lake: FakeLake) -> bytes:
    ds = Dataset(loader_lake.layout, seed=0, action_horizon=2)
    video = ds._gather.video
    chunk = video._chunk(0, 0, 0)
    units = chunk.decoder.access_units
    assert units is not None and len(units) == CHUNK_FRAMES
    loc = video._locators
    uri = loc.video_files[loc.video_file[0]]
    path = video._reader.local_path(uri, table="video", version=video._version)
    index = video._chunk_index
    assert index is not None
    entry = index.entries(video._reader, uri, path)[int(loc.video_row_group[0, 0])].tolist()
    from pi_loader.reading._chunk_index import page_value

    return page_value(video._reader.read_range(uri, path, entry[0], entry[1]), uri, 0)


def test_units_that_do_not_fit_the_bytes_are_refused(loader_lake: FakeLake) -> None:
    data = _chunk_bytes(loader_lake)
    good = ChunkDecoder(data)
    units = good.access_units
    assert units is not None
    want = good.rgb(2)
    assert np.array_equal(ChunkDecoder(data, units).rgb(2), want)
    rng = np.random.default_rng(35)
    bad_units: list[list[tuple[int, int, int]]] = [
        [(0, 3, True)] * len(units),  # a start code and nothing else
        [(len(data), len(data) + 100, True)] * len(units),  # past the end
        [(s + 1, e, k) for s, e, k in units],  # off by one byte
    ]
    for _ in range(20):  # generated: random spans of the chunk
        cuts = np.sort(rng.integers(0, len(data), size=2 * len(units))).tolist()
        bad_units.append([(cuts[2 * i], cuts[2 * i + 1], True) for i in range(len(units))])
    for bad in bad_units:
        try:
            got = ChunkDecoder(data, bad).rgb(2)
        except VideoError as err:
            assert "H.264 chunk" in str(err)
            continue
        assert got.shape == want.shape  # a span that still decodes gives a frame, never a crash
    # the good units beside them still decode the same pixels
    assert np.array_equal(ChunkDecoder(data, units).rgb(2), want)
