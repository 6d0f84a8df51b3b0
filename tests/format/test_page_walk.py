"""`pi_format.lake.page_walk.pages_intact` (the C-backed page-CRC walk the loader runs on every
episodes file an open reads) on real lake files: intact files of every table pass, and no seeded
bit flip, truncation or garbage prefix passes it where the authoritative `check_parquet_file`
finds a fault (a False only sends the file to that check: it is not a verdict)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from pi_format import LakeLayout
from pi_format.lake import check_parquet_file
from pi_format.lake.page_walk import pages_intact

from tests.fixtures.lake_factory import append_episodes, make_episode

SIZE = (32, 32)


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> LakeLayout:
    layout = LakeLayout(str(tmp_path_factory.mktemp("walk") / "lake"))
    episodes = [make_episode(i, steps=12, cameras=("front",), size=SIZE, seed=0) for i in range(4)]
    append_episodes(layout, episodes, SIZE, group=2)
    return layout


def _files(layout: LakeLayout, table: str) -> list[Path]:
    return sorted(Path(layout.table(table)).glob("part-*.parquet"))


def test_intact_files_of_every_table_pass(lake: LakeLayout) -> None:
    for table in ("episodes", "steps", "video"):
        files = _files(lake, table)
        assert files, table
        for path in files:
            assert pages_intact(str(path)), path


def test_a_missing_file_does_not_pass(tmp_path: Path) -> None:
    assert not pages_intact(str(tmp_path / "gone.parquet"))
    (tmp_path / "empty.parquet").write_bytes(b"")
    assert not pages_intact(str(tmp_path / "empty.parquet"))


def test_seeded_damage_never_passes_where_the_authoritative_walk_finds_a_fault(
    lake: LakeLayout, tmp_path: Path
) -> None:
    rng = random.Random(33)
    refused = 0
    for path in _files(lake, "episodes"):
        data = path.read_bytes()
        for trial in range(60):
            damaged = bytearray(data)
            kind = trial % 3
            if kind == 0:  # one bit flipped anywhere but the magic
                at = rng.randrange(4, len(data) - 4)
                damaged[at] ^= 1 << rng.randrange(8)
            elif kind == 1:  # cut short
                damaged = damaged[: rng.randrange(1, len(data))]
            else:  # garbage before the first page
                damaged = bytearray(b"PAR1" + rng.randbytes(rng.randrange(1, 64))) + damaged[4:]
            target = tmp_path / f"d{trial}.parquet"
            target.write_bytes(bytes(damaged))
            if not pages_intact(str(target)):
                refused += 1
                continue
            check = check_parquet_file(str(target), require_crc=True, decode=False)
            assert not check.faults, (path, trial, check.faults[:1])
    assert refused > 0  # the damage reached the walk
