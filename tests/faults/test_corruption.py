"""Fault test: stored bytes flipped on purpose (architecture decision 10).

A real lake (raw, steps, video, episodes written through the stream job's featurizer and
`LakeWriter`, `tests.fixtures.raw_lake`) is copied once per flip, and one byte of one Parquet data
page is flipped (seeded: the page, the byte and the bit pattern). Then, on the copy:

1. every sample is read through pi_loader: each read either raises (a `PiLoaderError`: the
   damage is detected) or returns exactly the clean lake's bytes (the flip is harmless to that
   sample); a sample that differs without an error is the failure this test exists for;
2. `pilake verify` finds the flip: a fault in the flipped file, at the flipped row group;
3. `pilake repair` restores the samples: proprio and actions bit for bit equal to the clean
   read, every frame decodes, and a second scrub is clean except where `raw` itself was hit
   (raw is the ground truth: nothing can restore it, and its training rows are intact).

One more case flips a steps page and the same episode's raw page: repair keeps it aside.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
from pi_format.lake.integrity import column_chunk_ranges
from pi_jobs.integrity import RepairConfig, VerifyConfig, repair_lake, verify_lake

from tests.fixtures.raw_lake import write_raw_lake

pytestmark = pytest.mark.integration

SEED = 2511
TABLES = ("steps", "video", "episodes", "raw")
FLIPS_PER_TABLE = 4  # 16 flips, each on its own copy of the lake
_DATA_PAGE = 0


@dataclass(frozen=True)
class Flip:
    table: str
    file: str
    row_group: int
    column: str
    offset: int  # byte in the file
    xor: int

    def __str__(self) -> str:
        return f"{self.table} rg {self.row_group} {self.column} @{self.offset} ^{self.xor:#04x}"


def data_pages(path: Path) -> list[tuple[int, str, int, int]]:
    """(row group, column, first byte of the page's stored data, its length) of every data page."""
    from pi_format.lake._page_header import page_header

    raw = path.read_bytes()
    pages = []
    for rg, column, start, length in column_chunk_ranges(pq.ParquetFile(path).metadata):
        pos = start
        while pos < start + length:
            header = page_header(raw, pos)
            body = pos + header.header_bytes
            if header.page_type == _DATA_PAGE and header.compressed_size > 0:
                pages.append((rg, column, body, header.compressed_size))
            pos = body + header.compressed_size
    return pages


def plan_flips(root: Path) -> list[Flip]:
    rng = np.random.default_rng(SEED)
    flips = []
    for table in TABLES:
        (path,) = sorted((root / table).glob("*.parquet"))  # one group commit: one file per table
        pages = data_pages(path)
        for k in rng.choice(len(pages), size=FLIPS_PER_TABLE, replace=False):
            rg, column, body, size = pages[int(k)]
            offset = body + int(rng.integers(size))
            flips.append(Flip(table, path.name, rg, column, offset, int(rng.integers(1, 256))))
    return flips


def flip(root: Path, f: Flip) -> None:
    path = root / f.table / f.file
    data = bytearray(path.read_bytes())
    data[f.offset] ^= f.xor
    path.write_bytes(bytes(data))


def read_samples(root: Path) -> dict[tuple[str, int], dict[str, Any] | BaseException]:
    """Every sample of the lake by (episode_id, step): its arrays, or the error reading it raised."""
    from pi_loader import Dataset, PiLoaderError, SampleSpec

    out: dict[tuple[str, int], dict[str, Any] | BaseException] = {}
    try:
        ds = Dataset(str(root), spec=SampleSpec(action_horizon=4))
    except PiLoaderError as err:  # the damage is in what the open reads (the markers)
        return {("*", -1): err}
    for i in range(len(ds)):
        try:
            sample = ds[i]
        except PiLoaderError as err:
            out[("?", i)] = err
            continue
        out[(str(sample["episode_id"]), int(np.asarray(sample["step"])))] = sample
    return out


def same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    keys = set(a) | set(b)
    return all(
        np.array_equal(np.asarray(a[k]), np.asarray(b[k])) if k in a and k in b else False for k in keys
    )


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[tuple[str, int], Any]]]:
    root = tmp_path_factory.mktemp("corruption") / "clean"
    write_raw_lake(root)
    samples = read_samples(root)
    assert samples and not any(isinstance(s, BaseException) for s in samples.values())
    yield root, samples


@pytest.fixture(scope="module")
def flips(clean: tuple[Path, Any]) -> list[Flip]:
    planned = plan_flips(clean[0])
    assert {f.table for f in planned} == set(TABLES) and len(planned) == FLIPS_PER_TABLE * len(TABLES)
    return planned


def _copy(clean_root: Path, tmp_path: Path) -> Path:
    root = tmp_path / "lake"
    shutil.copytree(clean_root, root)
    return root


def test_every_flip_is_detected_or_harmless_found_by_verify_and_repaired(
    clean: tuple[Path, dict[tuple[str, int], Any]], flips: list[Flip], tmp_path: Path
) -> None:
    clean_root, clean_samples = clean
    outcomes: dict[str, int] = {"detected": 0, "harmless": 0}
    silent: list[str] = []
    for n, f in enumerate(flips):
        root = _copy(clean_root, tmp_path / f"flip{n}")
        flip(root, f)
        # 1. the reader: an error, or the clean bytes; never a different sample
        got = read_samples(root)
        errors = [v for v in got.values() if isinstance(v, BaseException)]
        changed = [
            k for k, v in got.items() if not isinstance(v, BaseException) and not same(v, clean_samples[k])
        ]
        if changed:
            silent.append(f"{f}: {len(changed)} samples changed without an error, e.g. {changed[0]}")
        outcomes["detected" if errors else "harmless"] += 1
        if errors:  # the error names the file and where in it
            text = str(errors[0])
            assert f.file in text or f.table in text, (str(f), text)
        # 2. the scrub finds it, at the flipped row group
        report = verify_lake(report_layout(root), VerifyConfig())
        assert report.exit_code == 2, f"verify missed {f}"
        assert any(
            x.table == f.table and x.file == f.file and x.row_group == f.row_group for x in report.faults
        ), (str(f), [x.as_dict() for x in report.faults])
        assert report.corrupt_episodes, f"{f}: no episode named"
        # 3. repair restores every sample: proprio and actions bit for bit, frames decode
        repaired = repair_lake(report_layout(root), report, RepairConfig())
        if f.table == "raw":
            assert repaired.raw_only and not repaired.repaired, str(f)
        else:
            assert repaired.repaired and not repaired.kept_aside, (str(f), repaired.as_dict())
        after = read_samples(root)
        assert set(after) == set(clean_samples), str(f)
        for key, sample in after.items():
            assert not isinstance(sample, BaseException), (str(f), key, sample)
            want = clean_samples[key]
            for name in ("observation.state", "action", "action_is_pad"):
                assert np.array_equal(sample[name], want[name]), (str(f), key, name)
            for name in (k for k in want if k.startswith("observation.images.")):
                assert sample[name].shape == want[name].shape, (str(f), key, repaired.as_dict())
                assert sample[name].dtype == np.uint8
        again = verify_lake(report_layout(root), VerifyConfig())
        if f.table == "raw":  # raw's damage stays (nothing can restore it) and is still reported
            assert {x.table for x in again.faults} == {"raw"}, str(f)
        else:
            assert again.exit_code == 0, (str(f), [x.as_dict() for x in again.faults])
        shutil.rmtree(root.parent)
    print(f"corruption: {len(flips)} flips: {outcomes}")
    assert not silent, "silent damage:\n" + "\n".join(silent)
    assert outcomes["detected"] > 0


def report_layout(root: Path) -> Any:
    from pi_format import LakeLayout

    return LakeLayout(str(root))


def test_damage_in_raw_too_is_kept_aside_and_reported_by_the_pin(
    clean: tuple[Path, dict[tuple[str, int], Any]], tmp_path: Path
) -> None:
    from pi_format.lake import PinStore
    from pi_jobs.maintenance.datasets import check_dataset, create_dataset

    clean_root, _ = clean
    root = _copy(clean_root, tmp_path)
    layout = report_layout(root)
    create_dataset(layout, "all-v1", episode_ids=None)
    pin = PinStore(layout).get("all-v1")
    (steps_file,) = sorted((root / "steps").glob("*.parquet"))
    (raw_file,) = sorted((root / "raw").glob("*.parquet"))
    # the first steps row group and the raw row group holding the same episode
    steps_pages = [p for p in data_pages(steps_file) if p[0] == 0 and p[1].startswith("proprio")]
    episode = str(pq.ParquetFile(steps_file).read_row_group(0, columns=["episode_id"]).column(0)[0])
    raw_ids = pq.ParquetFile(raw_file).read(columns=["episode_id"]).column(0).to_pylist()
    raw_rg = _row_group_of(raw_file, raw_ids.index(episode))
    raw_pages = [p for p in data_pages(raw_file) if p[0] == raw_rg and p[1] == "message"]
    _, _, body, size = steps_pages[0]
    data = bytearray(steps_file.read_bytes())
    data[body + size // 2] ^= 0x20
    steps_file.write_bytes(bytes(data))
    # raw pages are zstd: the first flip (from the page's middle on) that breaks one of this
    # episode's messages, as the wire check sees it
    _, _, body, size = raw_pages[0]
    clean_raw = raw_file.read_bytes()
    for offset in range(body + size // 2, body + size):
        data = bytearray(clean_raw)
        data[offset] ^= 0x20
        raw_file.write_bytes(bytes(data))
        if not _messages_decode(raw_file, raw_rg, episode):
            break
    else:
        pytest.fail("no flip of the raw page breaks the episode's messages")
    report = verify_lake(layout, VerifyConfig())
    assert {x.table for x in report.faults} == {"steps", "raw"}
    damaged = next(e for e in report.corrupt_episodes if e["episode_id"] == episode)
    assert damaged["visible"] and damaged["pins"] == ["all-v1"]
    result = repair_lake(layout, report, RepairConfig())
    assert [k["episode_id"] for k in result.kept_aside] == [episode], result.as_dict()
    assert result.exit_code == 2
    # the episode left new selections; the pin that names the damaged attempt reports it
    from pi_loader import Dataset, SampleSpec

    assert episode not in {str(e) for e in Dataset(str(root), spec=SampleSpec(action_horizon=4)).episode_ids}
    check = check_dataset(layout, "all-v1")
    assert not check.intact
    assert [d["episode_id"] for d in check.damaged] == [episode]
    assert dict(zip(pin.episode_ids, pin.attempt_ids, strict=True))[episode] == check.damaged[0]["attempt_id"]
    assert "raw" in check.damaged[0]["details"]


def _messages_decode(path: Path, row_group: int, episode: str) -> bool:
    from pi_format import ProtocolError
    from pi_format.wire import decode_chunk

    try:
        rows = pq.ParquetFile(path).read_row_group(row_group, columns=["episode_id", "message"])
        for e, m in zip(rows.column(0).to_pylist(), rows.column(1).to_pylist(), strict=True):
            if e == episode:
                decode_chunk(m)
    except (ProtocolError, OSError, ValueError):
        return False
    return True


def _row_group_of(path: Path, row: int) -> int:
    metadata = pq.ParquetFile(path).metadata
    first = 0
    for rg in range(metadata.num_row_groups):
        first += metadata.row_group(rg).num_rows
        if row < first:
            return rg
    raise IndexError(row)
