"""Footer-free video reads through the host-wide chunk index (pi_loader.reading._chunk_index)."""

from __future__ import annotations

import multiprocessing as mp
import os
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
from pi_loader import CorruptDataError, Dataset, PiLoaderError, SampleSpec
from pi_loader.reading._chunk_index import OFFSET, SIZE, ChunkIndex, build_entries, page_value
from pi_loader.reading._host_index import IndexRows
from pi_loader.reading._row_groups import RowGroupReader
from pi_loader.reading._storage import LocalStorage

from tests.fixtures.lake_factory import CHUNK_FRAMES, FakeLake, write_lake

CAMERAS = ("front", "wrist")
STEPS = 9


def _index(ds: Any) -> ChunkIndex:
    """The dataset's chunk index (None only when a test forces the pyarrow fallback)."""
    index = ds._gather.video._chunk_index
    assert index is not None
    return index


@pytest.fixture(scope="module")
def grouped_lake(tmp_path_factory: pytest.TempPathFactory) -> FakeLake:
    """6 episodes in group commits of 3: two video files of many one-row row groups."""
    return write_lake(
        tmp_path_factory.mktemp("grouped"),
        episodes=6,
        steps=STEPS,
        cameras=CAMERAS,
        size=(32, 32),
        group=3,
        garbage_attempt=False,
    )


def _video_files(lake: FakeLake) -> list[str]:
    return sorted(str(p) for p in Path(lake.layout.table("video")).glob("*.parquet"))


def _dataset(lake: FakeLake | str, **kwargs: Any) -> Dataset:
    root = lake if isinstance(lake, str) else lake.layout
    return Dataset(root, spec=SampleSpec(cameras=CAMERAS, action_horizon=2), seed=3, **kwargs)


def _all_frames(ds: Dataset) -> dict[tuple[int, int, int], np.ndarray]:
    """Frame 0 of every chunk of every camera of every episode, read through the dataset."""
    video = ds._gather.video
    out = {}
    for e in range(len(ds.episode_ids)):
        for k in range(len(CAMERAS)):
            for chunk in range(2):  # every camera of STEPS steps has >= 2 chunks
                out[(e, k, chunk)] = video.frame(e, k, chunk * CHUNK_FRAMES)
    return out


def test_footer_free_bytes_equal_pyarrow_for_every_row_group(grouped_lake: FakeLake, tmp_path: Path) -> None:
    reader = RowGroupReader(LocalStorage())
    index = ChunkIndex(str(tmp_path / "index"))
    files = _video_files(grouped_lake)
    assert len(files) == 2
    for path in files:
        entries = index.entries(reader, path, path)
        parquet = pq.ParquetFile(path)
        assert entries.shape == (parquet.metadata.num_row_groups, 8) and parquet.metadata.num_row_groups > 10
        for g in range(parquet.metadata.num_row_groups):
            raw = reader.read_range(path, path, int(entries[g, OFFSET]), int(entries[g, SIZE]))
            want = parquet.read_row_group(g, columns=["data"]).column("data")[0].as_py()
            assert page_value(raw, path, g) == want
    assert index.builds == 2 and reader.footer_reads == 2
    assert len(list((tmp_path / "index").glob("*.npy"))) == 2
    # the same index, again: read from the saved file a row at a time (nothing mapped, nothing
    # held), nothing built or parsed
    again = index.entries(reader, files[0], files[0])
    assert isinstance(again, IndexRows) and index.builds == 2 and reader.footer_reads == 2
    entries_of_first = build_entries(reader, files[0], files[0], os.stat(files[0]).st_size)
    assert np.array_equal(again[3], entries_of_first[3]) and again[3, SIZE] == entries_of_first[3, SIZE]


def _frames_in_child(ds: Dataset, out: Any) -> None:
    frames = _all_frames(ds)
    out.put((ds.read_stats, _index(ds).builds, frames))


def test_a_second_process_reuses_the_index_without_parsing_footers(grouped_lake: FakeLake) -> None:
    ds = _dataset(grouped_lake)
    want = _all_frames(ds)
    directory = _index(ds).directory
    assert directory is not None
    assert _index(ds).builds == 2 and ds.read_stats["footer_reads"] == 2
    mtimes = {p: p.stat().st_mtime_ns for p in Path(directory).glob("*.npy")}
    assert len(mtimes) == 2

    ctx: Any = mp.get_context("spawn")
    out = ctx.Queue()
    child = ctx.Process(target=_frames_in_child, args=(_dataset(grouped_lake), out))
    child.start()
    stats, builds, frames = out.get(timeout=180)
    child.join(timeout=60)
    assert child.exitcode == 0
    assert builds == 0 and stats["footer_reads"] == 0
    assert stats["video_reads"] == len(want)
    # only the chunks: one ranged read each, no footer bytes
    data_chunks = []
    for path in _video_files(grouped_lake):
        metadata = pq.read_metadata(path)
        j = metadata.schema.names.index("data")
        data_chunks += [
            metadata.row_group(g).column(j).total_compressed_size for g in range(metadata.num_row_groups)
        ]
    assert 0 < stats["bytes_read"] <= len(want) * max(data_chunks)
    assert {p: p.stat().st_mtime_ns for p in Path(directory).glob("*.npy")} == mtimes
    for key, frame in want.items():
        np.testing.assert_array_equal(frames[key], frame)


def test_a_corrupt_chunk_or_a_short_read_names_the_file_and_row_group(tmp_path: Path) -> None:
    lake = write_lake(
        tmp_path / "lake", episodes=2, steps=STEPS, cameras=CAMERAS, size=(32, 32), garbage_attempt=False
    )
    ds = _dataset(lake)
    ds._gather.video.frame(0, 0, 0)  # builds the index
    (path,) = _video_files(lake)
    index_dir = Path(str(_index(ds).directory))
    (index_file,) = index_dir.glob("*.npy")
    entries = np.load(index_file)
    group = 1  # chunk 1 of camera "front" of episode 0
    offset = int(entries[group, OFFSET])

    # a corrupt page header (the file rewritten in place with the same size)
    data = bytearray(Path(path).read_bytes())
    data[offset] = 0x00
    Path(path).write_bytes(bytes(data))
    fresh = _dataset(lake)
    # damage, not a bug: a CorruptDataError (skip mode skips it) naming the file, row group, episode
    pattern = rf"{Path(path).name}, row group {group}, .*PageHeader field 1"
    with pytest.raises(CorruptDataError, match=pattern):
        fresh._gather.video.frame(0, 0, CHUNK_FRAMES)
    data[offset] = 0x15
    Path(path).write_bytes(bytes(data))
    np.testing.assert_array_equal(
        _dataset(lake)._gather.video.frame(0, 0, CHUNK_FRAMES), ds._gather.video.frame(0, 0, CHUNK_FRAMES)
    )

    # an index that promises more bytes than the file has: a short read
    entries[group, OFFSET] = len(data) - 10
    np.save(index_file, entries)
    pattern = rf"{Path(path).name}.*\(row group {group}\) got only 10 bytes"
    with pytest.raises(CorruptDataError, match=pattern):
        _dataset(lake)._gather.video.frame(0, 0, CHUNK_FRAMES)


def test_a_locator_into_another_camera_is_caught_on_the_footer_free_path(grouped_lake: FakeLake) -> None:
    ds = _dataset(grouped_lake)
    ds._gather.video.frame(0, 1, 0)
    locators = ds._gather.video._locators  # this dataset's own copy
    locators.video_row_group[0, 0] = locators.video_row_group[0, 1]  # "front" now points at "wrist"
    with pytest.raises(PiLoaderError, match=r"holds chunk 0 of another \(episode, attempt, camera\)"):
        ds._gather.video.frame(0, 0, 0)
    locators.video_row_group[0, 0] += 1  # and at its chunk 1: both differ
    with pytest.raises(PiLoaderError, match=r"should hold chunk 0 .* holds chunk 1 of another"):
        ds._gather.video.frame(0, 0, 0)
    # the footer-free path said so (the video footer was parsed once, to build the index)
    assert _index(ds).builds == 1 and ds.read_stats["footer_reads"] == 1


@pytest.mark.parametrize(
    ("compression", "dictionary"), [("zstd", False), ("none", True)], ids=["compressed", "dictionary"]
)
def test_a_file_not_laid_out_for_the_index_falls_back_to_row_group_reads(
    tmp_path: Path, compression: str, dictionary: bool
) -> None:
    lake = write_lake(
        tmp_path / "lake", episodes=2, steps=STEPS, cameras=CAMERAS, size=(32, 32), garbage_attempt=False
    )
    want = _all_frames(_dataset(lake))
    # the same rows in the same row groups, rewritten in place the way another writer might
    (path,) = _video_files(lake)
    table = pq.read_table(path)
    os.unlink(path)
    with pq.ParquetWriter(path, table.schema, compression=compression, use_dictionary=dictionary) as writer:
        for i in range(table.num_rows):
            writer.write_table(table.slice(i, 1), row_group_size=1)
    ds = _dataset(lake)
    got = _all_frames(ds)
    for key, frame in want.items():
        np.testing.assert_array_equal(got[key], frame)
    index = _index(ds)
    assert index.builds == 1 and index.entries(ds._reader, path, path).shape == (0, 8)
    # one footer parse: the one that found the file unindexable, kept for the row-group reads
    assert ds.read_stats["footer_reads"] == 1
    # another process of the host reads the empty index and goes straight to pyarrow
    other = _dataset(lake)
    other._gather.video.frame(1, 1, 0)
    assert _index(other).builds == 0 and other.read_stats["footer_reads"] == 1
