"""Damaged bytes through the public API (architecture decision 10): a CorruptDataError naming
the table, the file, the row group and the episode; `Loader(on_corrupt="skip")` delivers every
other sample unchanged and counts the skipped ones (stats and metrics); never a wrong sample.
Both video read paths (the footer-free chunk index, checked by the page CRC; the row-group path,
checked by pyarrow's page CRCs and the row's chunk_crc32) and the markers read at open."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from pi_loader import CorruptDataError, Dataset, Loader, SampleSpec, ShardSpec

from tests.fixtures.lake_factory import FakeLake, write_lake

SPEC = SampleSpec(action_horizon=2)


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> FakeLake:
    root = tmp_path_factory.mktemp("on_corrupt") / "lake"
    return write_lake(root, episodes=3, steps=9, cameras=("front",), size=(32, 32), garbage_attempt=False)


def _copy(clean: FakeLake, tmp_path: Path) -> Path:
    root = tmp_path / "lake"
    shutil.copytree(clean.layout.root, root)
    return root


def _flip_video_chunk(root: Path, group: int) -> None:
    """One byte in the middle of the `data` page of video row group `group`."""
    (path,) = sorted((root / "video").glob("*.parquet"))
    metadata = pq.ParquetFile(path).metadata
    column = metadata.row_group(group).column(metadata.schema.names.index("data"))
    data = bytearray(path.read_bytes())
    data[column.data_page_offset + column.total_compressed_size // 2] ^= 0x08
    path.write_bytes(bytes(data))


def _by_key(batch: dict[str, np.ndarray]) -> dict[tuple[str, int], dict[str, np.ndarray]]:
    return {
        (str(e), int(s)): {k: v[i] for k, v in batch.items()}
        for i, (e, s) in enumerate(zip(batch["episode_id"], batch["step"], strict=True))
    }


@pytest.mark.parametrize("chunk_index", [True, False], ids=["chunk-index", "row-group"])
def test_a_damaged_chunk_is_an_error_naming_file_row_group_and_episode(
    clean: FakeLake, tmp_path: Path, chunk_index: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _copy(clean, tmp_path)
    _flip_video_chunk(root, 1)
    if not chunk_index:  # the row-group path: as for a file the chunk index does not cover
        monkeypatch.setattr("pi_loader.reading._chunk_index._data_chunks", lambda metadata, size: None)
    ds = Dataset(str(root), spec=SPEC)
    errors = []
    for i in range(len(ds)):
        try:
            ds[i]
        except CorruptDataError as err:
            errors.append(err)
    assert errors, "the damaged chunk was read without an error"
    where = errors[0].where
    (name,) = [p.name for p in (root / "video").glob("*.parquet")]
    assert (where["table"], where["row_group"]) == ("video", 1) and name in str(where["file"])
    assert where["episode_id"] == clean.episode_ids[0]  # row group 1: its second chunk
    assert "pilake verify" in str(errors[0])


def test_the_loader_skips_and_counts_damaged_samples_and_delivers_the_rest_unchanged(
    clean: FakeLake, tmp_path: Path
) -> None:
    want = _by_key(Dataset(clean.layout.root, spec=SPEC).samples(np.arange(27)))
    root = _copy(clean, tmp_path)
    _flip_video_chunk(root, 1)
    ds = Dataset(str(root), spec=SPEC)
    damaged = set()
    for i in range(len(ds)):
        try:
            ds.sample(i)
        except CorruptDataError:
            e, step = ds._index.locate(i)
            damaged.add((ds.episode_ids[e], int(step)))
    assert damaged
    with pytest.raises(CorruptDataError):
        list(Loader(ds, batch_size=4, shard=ShardSpec(0, 1), num_workers=0))
    for workers in (0, 1):
        loader = Loader(ds, batch_size=4, shard=ShardSpec(0, 1), num_workers=workers, on_corrupt="skip")
        got: dict[tuple[str, int], dict[str, np.ndarray]] = {}
        for batch in loader:
            got.update(_by_key(batch))
        assert set(got) == set(want) - damaged, workers
        for key, sample in got.items():
            for name, value in sample.items():
                assert np.array_equal(value, want[key][name]), (key, name)
        stats = loader.stats()
        assert stats.corrupt_skipped == len(damaged) and stats.samples == len(got)
        loader.close()
    with pytest.raises(ValueError, match="on_corrupt must be one of"):
        Loader(ds, batch_size=4, shard=ShardSpec(0, 1), num_workers=0, on_corrupt="ignore")


def test_damaged_markers_fail_the_open_naming_the_file(clean: FakeLake, tmp_path: Path) -> None:
    root = _copy(clean, tmp_path)
    (path,) = sorted((root / "episodes").glob("*.parquet"))
    metadata = pq.ParquetFile(path).metadata
    column = metadata.row_group(0).column(metadata.schema.names.index("step_count"))
    data = bytearray(path.read_bytes())
    data[column.data_page_offset + column.total_compressed_size - 2] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptDataError) as raised:
        Dataset(str(root), spec=SPEC)
    assert raised.value.where["table"] == "episodes" and path.name in str(raised.value.where["file"])
