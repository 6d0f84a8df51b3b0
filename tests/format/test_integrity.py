"""pi_format.lake.integrity: every page the lake writes carries a CRC, a page walk finds a
flipped byte and names its row group and column, video chunks carry and check `chunk_crc32`,
and files written without checksums are "unverifiable", not "ok"."""

from __future__ import annotations

import glob
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pi_format.lake import (
    CHUNK_CRC_COLUMN,
    ChecksumError,
    check_chunk_crcs,
    check_parquet_file,
    chunk_crc32,
    with_chunk_crcs,
)
from pi_format.lake.integrity import column_chunk_ranges

from tests.fixtures.lake_factory import write_lake


@pytest.fixture(scope="module")
def lake_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("integrity") / "lake"
    write_lake(root, episodes=2, steps=70, cameras=["front", "wrist"], garbage_attempt=False)
    return root


def _files(root: Path, table: str) -> list[str]:
    return sorted(glob.glob(f"{root}/{table}/*.parquet"))


@pytest.mark.parametrize("table", ["steps", "video", "episodes"])
def test_every_page_the_writer_writes_has_a_crc(lake_root: Path, table: str) -> None:
    files = _files(lake_root, table)
    assert files
    for path in files:
        check = check_parquet_file(path)
        assert check.status == "ok", check.faults
        assert check.pages > 0 and check.pages_without_crc == 0


def test_video_rows_carry_the_crc_of_their_bytes(lake_root: Path) -> None:
    rows = pq.read_table(_files(lake_root, "video")[0])
    crcs = rows.column(CHUNK_CRC_COLUMN).to_pylist()
    assert None not in crcs
    assert crcs == [chunk_crc32(d) for d in rows.column("data").to_pylist()]
    assert check_chunk_crcs(rows) == 0


def _flip(path: str, offset: int, tmp: Path) -> str:
    data = bytearray(Path(path).read_bytes())
    data[offset] ^= 0x10
    out = tmp / Path(path).name
    out.write_bytes(bytes(data))
    return str(out)


def test_a_flipped_byte_in_a_page_is_found_with_its_row_group_and_column(
    lake_root: Path, tmp_path: Path
) -> None:
    path = _files(lake_root, "steps")[0]
    metadata = pq.ParquetFile(path).metadata
    rg, column, start, length = [r for r in column_chunk_ranges(metadata) if r[1].startswith("proprio")][1]
    flipped = _flip(path, start + length - 3, tmp_path)  # inside the chunk's last page's bytes
    check = check_parquet_file(flipped)
    assert check.status == "corrupt"
    assert [(f.row_group, f.column) for f in check.faults] == [(rg, column)]
    assert "CRC" in check.faults[0].detail
    # pyarrow's own check agrees: the reader that verifies refuses the page
    with pytest.raises(OSError, match="CRC"):
        pq.ParquetFile(flipped, page_checksum_verification=True).read_row_group(rg)


def test_files_without_page_crcs_are_unverifiable(tmp_path: Path) -> None:
    path = tmp_path / "old.parquet"
    pq.write_table(pa.table({"a": list(range(100))}), path)  # no write_page_checksum: an older lake
    check = check_parquet_file(str(path))
    assert check.status == "unverifiable"
    assert check.pages_without_crc == check.pages > 0


def test_a_chunk_whose_bytes_changed_raises_naming_episode_and_chunk(lake_root: Path) -> None:
    rows = pq.read_table(_files(lake_root, "video")[0])
    data = rows.column("data").to_pylist()
    data[3] = bytes([data[3][0] ^ 1]) + data[3][1:]
    bad = rows.set_column(rows.schema.get_field_index("data"), "data", pa.array(data, pa.binary()))
    with pytest.raises(ChecksumError, match=r"chunk_crc32 .* != ") as err:
        check_chunk_crcs(bad, where={"table": "video", "file": "part-x.parquet"})
    assert err.value.where["row"] == 3
    assert err.value.where["file"] == "part-x.parquet"
    assert err.value.where["episode_id"] == rows.column("episode_id")[3].as_py()
    # a writer refuses to store it with its old checksum
    with pytest.raises(ChecksumError):
        with_chunk_crcs(bad)


def test_rows_without_the_column_are_unverifiable_and_get_one_when_written(lake_root: Path) -> None:
    rows = pq.read_table(_files(lake_root, "video")[0]).drop_columns([CHUNK_CRC_COLUMN])
    assert check_chunk_crcs(rows) == rows.num_rows
    filled = with_chunk_crcs(rows)
    assert check_chunk_crcs(filled) == 0


def test_the_visibility_reads_check_page_crcs(lake_root: Path, tmp_path: Path) -> None:
    import shutil

    from pi_format import LakeLayout
    from pi_format.lake import read_committed

    root = tmp_path / "lake"
    shutil.copytree(lake_root, root)
    layout = LakeLayout(str(root))
    assert read_committed(layout, ["step_count"]).num_rows == 2
    (path,) = _files(root, "episodes")
    metadata = pq.ParquetFile(path).metadata
    (_, _, start, length) = next(r for r in column_chunk_ranges(metadata) if r[1] == "step_count")
    data = bytearray(Path(path).read_bytes())
    data[start + length - 2] ^= 0x04  # the markers' step_count page
    Path(path).write_bytes(bytes(data))
    with pytest.raises(OSError, match="CRC"):
        read_committed(layout, ["step_count"])
