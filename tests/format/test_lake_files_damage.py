"""A damaged episodes file met while planning a compaction or GC (`read_lake_files`) is refused
with a `LakeError` naming the file, not pyarrow's bare "Unexpected end of stream"; nothing is
committed, and an undamaged lake beside it still plans."""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from pi_format.errors import LakeError
from pi_format.lake.file_groups import read_lake_files
from pi_jobs.maintenance import CompactConfig, GcConfig, compact, gc

from tests.fixtures.lake_factory import FakeLake, write_lake


def _damage(path: Path, how: str, seed: int) -> None:
    raw = bytearray(path.read_bytes())
    rng = random.Random(seed)
    if how == "truncated":
        path.write_bytes(bytes(raw[: len(raw) // 2]))
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "garbage":
        path.write_bytes(rng.randbytes(len(raw)))
    elif how == "huge_footer_length":  # the footer claims ~4 GiB: must not be allocated
        raw[-8:-4] = (0xFFFFFFF0).to_bytes(4, "little")
        path.write_bytes(bytes(raw))
    elif how == "bad_magic":
        raw[-4:] = b"XXXX"
        path.write_bytes(bytes(raw))
    elif how == "scrambled_footer":  # the Thrift footer overwritten with random bytes
        footer = int.from_bytes(raw[-8:-4], "little")
        raw[-8 - footer : -8] = rng.randbytes(footer)
        path.write_bytes(bytes(raw))
    else:
        raise AssertionError(how)


@pytest.fixture(scope="module")
def good_lake(tmp_path_factory: pytest.TempPathFactory) -> FakeLake:
    return write_lake(
        tmp_path_factory.mktemp("good") / "lake",
        episodes=4,
        steps=6,
        cameras=("front",),
        size=(16, 16),
        group=2,
    )


@pytest.mark.parametrize(
    "how", ["truncated", "empty", "garbage", "huge_footer_length", "bad_magic", "scrambled_footer"]
)
def test_a_damaged_episodes_file_is_named_and_nothing_is_committed(
    tmp_path: Path, how: str, good_lake: FakeLake
) -> None:
    lake = write_lake(tmp_path / "lake", episodes=6, steps=6, cameras=("front",), size=(16, 16), group=2)
    layout = lake.layout
    versions = {t: DeltaTable(layout.table(t)).version() for t in ("episodes", "steps", "video")}
    victim = Path(sorted(DeltaTable(layout.episodes).file_uris())[1])
    _damage(victim, how, seed=len(how))
    allocated = pa.total_allocated_bytes()
    with pytest.raises(LakeError, match=rf"episodes file .*{victim.name} does not read .*no plan was made"):
        read_lake_files(layout)
    assert pa.total_allocated_bytes() - allocated < 64 << 20
    with pytest.raises(LakeError, match=victim.name):
        compact(layout, CompactConfig())
    with pytest.raises(LakeError, match=victim.name):
        gc(layout, GcConfig(retention_hours=0))
    assert {t: DeltaTable(layout.table(t)).version() for t in versions} == versions
    # the undamaged lake beside it still plans
    plan = read_lake_files(good_lake.layout)
    assert plan.markers.num_rows == 4


@pytest.mark.parametrize("seed", range(8))
def test_generated_garbage_in_an_episodes_file_is_named(tmp_path: Path, seed: int) -> None:
    lake = write_lake(tmp_path / "lake", episodes=2, steps=4, cameras=("front",), size=(16, 16), group=1)
    victim = Path(sorted(DeltaTable(lake.layout.episodes).file_uris())[0])
    raw = bytearray(victim.read_bytes())
    rng = random.Random(seed)
    for _ in range(rng.randint(1, 64)):  # scattered byte overwrites, then maybe a cut
        at = rng.randrange(len(raw))
        raw[at : at + rng.randint(1, 16)] = rng.randbytes(rng.randint(1, 16))
    if rng.random() < 0.5:
        raw = raw[: rng.randrange(len(raw))]
    victim.write_bytes(bytes(raw))
    try:
        plan = read_lake_files(lake.layout)
    except LakeError as err:
        assert victim.name in str(err)
    else:  # the overwrites missed every byte the plan reads: the plan still has both markers
        assert plan.markers.num_rows == 2
