"""`pi_loader.reading._open_cache.OpenCache` on disk: an entry written (streamed into its file)
reads back equal (memory-mapped), and a damaged entry of any kind (cut short, garbage, a bit
flipped in its footer, empty) is a miss that removes it, never rows; the next save writes it
again."""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow as pa
import pytest
from pi_loader.reading._open_cache import OpenCache

VERSIONS = {"episodes": 3, "steps": 4, "video": 5}
FINGERPRINT = "3f2a9c"


def _rows(n: int = 2_000) -> pa.Table:
    return pa.table(
        {
            "episode_id": [f"r1-{i:06d}" for i in range(n)],
            "step_count": pa.array(range(n), pa.int64()),
            "proprio_mean": pa.array([[float(i), 1.0] for i in range(n)], pa.list_(pa.float32())),
        }
    )


def test_a_saved_entry_reads_back_equal(tmp_path: Path) -> None:
    cache = OpenCache(tmp_path / "opens")
    rows = _rows()
    cache.save(FINGERPRINT, VERSIONS, rows, ["steps"])
    entry = cache.load(FINGERPRINT, VERSIONS)
    assert entry is not None
    assert entry.rows.equals(rows) and entry.versions == VERSIONS and entry.checksummed == {"steps"}
    assert not [p for p in (tmp_path / "opens").iterdir() if p.name.startswith(".tmp-")]
    assert cache.load(FINGERPRINT, {**VERSIONS, "episodes": 4}) is None


@pytest.mark.parametrize("damage", ["truncated", "garbage", "footer_flip", "empty"])
def test_a_damaged_entry_is_a_miss_and_is_removed(tmp_path: Path, damage: str) -> None:
    cache = OpenCache(tmp_path / "opens")
    rows = _rows()
    cache.save(FINGERPRINT, VERSIONS, rows, [])
    (path,) = (tmp_path / "opens").glob("*.arrow")
    data = bytearray(path.read_bytes())
    rng = random.Random(damage)
    if damage == "truncated":
        data = data[: rng.randrange(8, len(data) // 2)]
    elif damage == "garbage":
        data = bytearray(rng.randbytes(len(data)))
    elif damage == "footer_flip":
        data[-12] ^= 0xFF  # the footer's length field
    else:
        data = bytearray()
    path.write_bytes(bytes(data))
    assert cache.load(FINGERPRINT, VERSIONS) is None
    assert not path.exists()
    cache.save(FINGERPRINT, VERSIONS, rows, [])
    entry = cache.load(FINGERPRINT, VERSIONS)
    assert entry is not None and entry.rows.equals(rows)
