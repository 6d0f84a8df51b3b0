"""`pilake verify`'s fast path (pi_jobs.integrity._fastscan: the C-backed page walk and one
decode of the whole file) against the slow, authoritative check it stands in for.

The fast path may only say "intact": for every file and every flipped byte, `check_file` with
the fast path must give exactly what the slow check alone gives (status, faults, pages,
attempts). Generated flips (seeded): every bit of the first page header of each column chunk
of the first row group, and random bytes across each file (page bodies, headers, footer). A
fast path that let one damaged byte through (a CRC not compared, a header field not held to the
footer) fails here; so would one that never ran (the clean files must take it).
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from pi_format import LakeLayout
from pi_format.lake import checksums_required, table_filesystem
from pi_jobs.integrity import VerifyConfig, _scan, verify_lake
from pi_jobs.integrity._fastscan import intact

from tests.fixtures.raw_lake import write_raw_lake

TABLES = ("raw", "steps", "video", "episodes")
RANDOM_FLIPS = 60  # per file, beside the header bits: ~5 s in all


@pytest.fixture(scope="module")
def clean_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("verify-fast") / "lake"
    write_raw_lake(root, robots=1, episodes_per_robot=2)
    return root


def _file(root: Path, table: str) -> Path:
    return sorted((root / table).glob("*.parquet"))[0]


def _check(path: Path, table: str, *, fast: bool, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """check_file on `path` as verify runs it, with the fast path on or off."""
    from deltalake import DeltaTable

    layout = LakeLayout(str(path.parent.parent))
    required = checksums_required(DeltaTable(layout.table(table)).metadata().description)
    with monkeypatch.context() as m:
        if not fast:
            m.setattr(_scan, "_fast_checks", lambda *args: False)
        fs, base = table_filesystem(layout.table(table))
        result = _scan.check_file(fs, base, table, path.name, path.stat().st_size, require_crc=required)
    return result.as_dict()


def _header_positions(path: Path, rng: random.Random) -> list[int]:
    """Every byte of the first page header of the column chunks of row group 0 (up to its
    body): of every column, or of 6 drawn when there are more (the episodes table has 40)."""
    metadata = pq.ParquetFile(path).metadata
    group = metadata.row_group(0)
    out: list[int] = []
    columns = range(group.num_columns)
    for c in sorted(rng.sample(columns, 6)) if len(columns) > 6 else columns:
        column = group.column(c)
        start = column.data_page_offset
        if column.has_dictionary_page and column.dictionary_page_offset is not None:
            start = min(start, column.dictionary_page_offset)
        out += range(start, start + 24)  # a v1 header with its CRC is 20-60 bytes
    return out


@pytest.mark.parametrize("table", TABLES)
def test_a_clean_file_takes_the_fast_path_and_checks_the_same(
    clean_root: Path, table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _file(clean_root, table)
    parquet, rows, pages = intact(path.read_bytes())
    assert parquet is not None and rows is not None and pages > 0, f"{table}: the fast path was not taken"
    assert rows.num_rows == parquet.metadata.num_rows
    fast, slow = (
        _check(path, table, fast=True, monkeypatch=monkeypatch),
        _check(path, table, fast=False, monkeypatch=monkeypatch),
    )
    assert fast == slow and fast["status"] == "ok" and fast["pages"] == pages


@pytest.mark.parametrize("table", TABLES)
def test_no_flipped_byte_gets_through_the_fast_path(
    clean_root: Path, table: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "lake"
    shutil.copytree(clean_root, root)
    path = _file(root, table)
    clean = path.read_bytes()
    rng = random.Random(f"verify-fast-{table}")
    flips = [(pos, bit) for pos in _header_positions(path, rng) for bit in (0, 7)]
    flips += [(rng.randrange(4, len(clean) - 8), rng.randrange(8)) for _ in range(RANDOM_FLIPS)]
    damaged, differ = 0, []
    for pos, bit in flips:
        data = bytearray(clean)
        data[pos] ^= 1 << bit
        path.write_bytes(bytes(data))
        fast = _check(path, table, fast=True, monkeypatch=monkeypatch)
        slow = _check(path, table, fast=False, monkeypatch=monkeypatch)
        if fast != slow:
            differ.append(
                f"byte {pos} bit {bit}: fast {fast['status']} {fast['faults'][:1]}, "
                f"slow {slow['status']} {slow['faults'][:1]}"
            )
        damaged += slow["status"] == "corrupt"
    assert not differ, f"{table}: the fast path disagrees with the slow check:\n" + "\n".join(differ[:10])
    assert damaged > len(flips) // 4, f"{table}: only {damaged} of {len(flips)} flips were damage"


def test_verify_names_a_flipped_page_body_byte_in_every_table(clean_root: Path, tmp_path: Path) -> None:
    """Through the real scrub: one byte inside a data page's body (CRC-covered) in each table."""
    root = tmp_path / "lake"
    shutil.copytree(clean_root, root)
    flipped = {}
    for table in TABLES:
        path = _file(root, table)
        column = pq.ParquetFile(path).metadata.row_group(0).column(0)
        start = column.data_page_offset
        if column.has_dictionary_page and column.dictionary_page_offset is not None:
            start = min(start, column.dictionary_page_offset)
        data = bytearray(path.read_bytes())
        data[start + column.total_compressed_size - 2] ^= 0x10  # in the body of the chunk's last page
        path.write_bytes(bytes(data))
        flipped[table] = path.name
    report = verify_lake(LakeLayout(str(root)), VerifyConfig())
    assert report.exit_code == 2
    for table, name in flipped.items():
        assert any(f.table == table and f.file == name and f.row_group == 0 for f in report.faults), table


def test_verify_with_two_workers_reports_what_one_does(clean_root: Path, tmp_path: Path) -> None:
    """`--workers 2`: the files checked in two processes, the same report (statuses, faults,
    episodes) as one process, damage included; a killed run's state is the same too."""
    root = tmp_path / "lake"
    shutil.copytree(clean_root, root)
    path = _file(root, "steps")
    column = pq.ParquetFile(path).metadata.row_group(0).column(1)
    start = column.data_page_offset
    if column.has_dictionary_page and column.dictionary_page_offset is not None:
        start = min(start, column.dictionary_page_offset)
    data = bytearray(path.read_bytes())
    data[start + column.total_compressed_size - 3] ^= 0x04  # in the body of the chunk's last page
    path.write_bytes(bytes(data))
    layout = LakeLayout(str(root))
    one = verify_lake(layout, VerifyConfig()).as_dict()
    two = verify_lake(layout, VerifyConfig(workers=2)).as_dict()
    for key in ("seconds", "mb_per_s"):
        one.pop(key), two.pop(key)
    assert one == two and one["corrupt"] and one["files_checked"] > 2
    with pytest.raises(ValueError, match="workers must be an int >= 1"):
        VerifyConfig(workers=0)
