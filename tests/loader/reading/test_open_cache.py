"""`pi_loader.reading._open_cache.OpenCache` on disk: an entry written (streamed into its file)
reads back equal (memory-mapped), and a damaged entry of any kind (cut short, garbage, a bit
flipped in its footer, empty) is a miss that removes it, never rows; the next save writes it
again."""

from __future__ import annotations

import json
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


def _saved(tmp_path: Path, rows: pa.Table) -> tuple[OpenCache, Path]:
    cache = OpenCache(tmp_path / "opens")
    cache.save(FINGERPRINT, VERSIONS, rows, [])
    (path,) = (tmp_path / "opens").glob("*.arrow")
    return cache, path


@pytest.mark.parametrize("seed", range(12))
def test_a_byte_flipped_anywhere_in_the_rows_is_a_miss(tmp_path: Path, seed: int) -> None:
    # Arrow IPC checks none of its body: without the recorded CRC, a flipped value byte read
    # back as other rows (a wrong step count, a wrong locator) and was trusted
    rows = _rows()
    cache, path = _saved(tmp_path, rows)
    data = bytearray(path.read_bytes())
    rng = random.Random(seed)
    data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    path.write_bytes(bytes(data))
    assert cache.load(FINGERPRINT, VERSIONS) is None
    assert not path.exists() and not path.with_suffix(".json").exists()
    cache.save(FINGERPRINT, VERSIONS, rows, [])
    entry = cache.load(FINGERPRINT, VERSIONS)
    assert entry is not None and entry.rows.equals(rows)


@pytest.mark.parametrize("damage", ["grown", "other_versions", "other_snapshot", "old_format", "record_lies"])
def test_an_entry_that_is_not_the_recorded_one_is_a_miss(tmp_path: Path, damage: str) -> None:
    rows = _rows()
    cache, path = _saved(tmp_path, rows)
    meta_path = path.with_suffix(".json")
    other_rows = _rows(1_500)
    if damage == "grown":
        path.write_bytes(path.read_bytes() + b"\0" * 64)
    elif damage in ("other_versions", "other_snapshot"):
        # a whole, valid entry of other table versions (or another snapshot) renamed into this name
        fingerprint, versions = (
            (FINGERPRINT, {**VERSIONS, "episodes": 2}) if damage == "other_versions" else ("abc123", VERSIONS)
        )
        cache.save(fingerprint, versions, other_rows, [])
        other = next(p for p in (tmp_path / "opens").glob("*.arrow") if p != path)
        other.replace(path)
        other.with_suffix(".json").replace(meta_path)
    elif damage == "old_format":  # what the code before the CRC wrote: no format, size or CRC
        meta_path.write_text(json.dumps({"versions": VERSIONS, "checksummed": []}))
    else:  # a record whose size and CRC name other bytes
        meta = json.loads(meta_path.read_text())
        meta["crc32"] = (meta["crc32"] + 1) % 2**32
        meta_path.write_text(json.dumps(meta))
    assert cache.load(FINGERPRINT, VERSIONS) is None
    assert not path.exists()
    newest = cache.newest(FINGERPRINT)
    assert newest is None or newest.rows.num_rows != other_rows.num_rows
    cache.save(FINGERPRINT, VERSIONS, rows, [])
    entry = cache.load(FINGERPRINT, VERSIONS)
    assert entry is not None and entry.rows.equals(rows)


def test_a_good_entry_beside_a_damaged_one_still_reads(tmp_path: Path) -> None:
    rows = _rows()
    cache = OpenCache(tmp_path / "opens")
    cache.save(FINGERPRINT, VERSIONS, rows, ["steps"])
    later = {**VERSIONS, "episodes": 9}
    cache.save(FINGERPRINT, later, rows, ["steps"])
    damaged = tmp_path / "opens" / f"{FINGERPRINT}-9-4-5.arrow"
    data = bytearray(damaged.read_bytes())
    data[len(data) // 2] ^= 0x10
    damaged.write_bytes(bytes(data))
    # the newest copy (used while the store is down) skips the damaged one for the good one
    entry = cache.newest(FINGERPRINT)
    assert entry is not None and entry.versions == VERSIONS and entry.rows.equals(rows)
    assert not damaged.exists()
