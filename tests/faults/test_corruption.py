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

The damage classes of issue 31, on a lake of two group commits (`clean2`): a page header's CRC
field marker flipped with a payload bit of the same page (steps, episodes); every single-bit
flip of a steps page header (generated: the loader raises a CorruptDataError or reads the clean
sample, and verify reports every flip the loader raises on); the newest episodes log commit
deleted; a truncated or zeroed episodes file (the Dataset opens without its episodes and names
it); an invalid JSON steps or video commit after the checkpoint (nothing is lost; repair sets it
aside and adds its file back); a truncated or footer-damaged steps or video file (a
CorruptDataError naming table, file and episode that `on_corrupt="skip"` skips, the other
commit's samples delivered unchanged). Each is then found by verify, repaired from raw and the
clean samples read back.
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


# -- damage classes of issue 31: header fields no CRC covers, lost commits, whole files and log
# -- entries damaged; each costs the episodes it holds, never the lake, and repair rebuilds them


@pytest.fixture(scope="module")
def clean2(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[tuple[str, int], Any], list[str]]:
    """A lake of two group commits (one file per table each: 2 episodes in each)."""
    from deltalake import DeltaTable

    root = tmp_path_factory.mktemp("corruption2") / "clean"
    lake = write_raw_lake(root, group_commits=2)
    samples = read_samples(root)
    assert samples and not any(isinstance(s, BaseException) for s in samples.values())
    assert DeltaTable(str(root / "episodes")).version() == 2
    return root, samples, lake.episode_ids


def _newest_file(root: Path, table: str) -> Path:
    """The data file the second group commit added to `table`."""
    from deltalake import DeltaTable
    from pi_format.lake._commit import file_sizes

    first = set(file_sizes(DeltaTable(str(root / table), version=1)))
    (name,) = set(file_sizes(DeltaTable(str(root / table), version=2))) - first
    return root / table / name


def _episodes_in(path: Path) -> set[str]:
    return {str(e) for e in pq.read_table(path, columns=["episode_id"]).column(0).to_pylist()}


def _assert_restored(root: Path, clean_samples: dict[tuple[str, int], Any], what: str) -> None:
    """Every sample of the clean lake reads back: proprio and actions bit for bit, frames decode."""
    after = read_samples(root)
    assert set(after) == set(clean_samples), what
    for key, sample in after.items():
        assert not isinstance(sample, BaseException), (what, key, sample)
        want = clean_samples[key]
        for name in ("observation.state", "action", "action_is_pad"):
            assert np.array_equal(sample[name], want[name]), (what, key, name)
        for name in (k for k in want if k.startswith("observation.images.")):
            assert sample[name].shape == want[name].shape and sample[name].dtype == np.uint8, (what, key)


def _verify_repair_restore(root: Path, clean_samples: dict[tuple[str, int], Any], what: str) -> Any:
    report = verify_lake(report_layout(root), VerifyConfig())
    assert report.exit_code == 2, f"verify missed {what}"
    repaired = repair_lake(report_layout(root), report, RepairConfig())
    assert repaired.exit_code == 0 and not repaired.kept_aside, (what, repaired.as_dict())
    _assert_restored(root, clean_samples, what)
    again = verify_lake(report_layout(root), VerifyConfig())
    assert again.exit_code == 0, (what, [x.as_dict() for x in again.faults])
    return report


def _first_page(path: Path, column: str) -> tuple[int, int, int, int]:
    """(offset of the header, header bytes, first body byte, body bytes) of the first data page
    of the column chunk of row group 0 whose path starts with `column`."""
    from pi_format.lake._page_header import page_header

    raw = path.read_bytes()
    (start,) = [
        s
        for rg, c, s, _ in column_chunk_ranges(pq.ParquetFile(path).metadata)
        if rg == 0 and c.startswith(column)
    ]
    header = page_header(raw, start)
    return start, header.header_bytes, start + header.header_bytes, header.compressed_size


def _crc_marker(data: bytes | bytearray, start: int) -> int:
    """The offset of the crc field's header byte (field 4, i32: 0x15) of the page header at
    `start`: after fields 1-3 (each 0x15 and a varint)."""
    pos = start
    for _ in range(3):
        assert data[pos] == 0x15
        pos += 1
        while data[pos] & 0x80:
            pos += 1
        pos += 1
    assert data[pos] == 0x15, "no crc field"
    return pos


@pytest.mark.parametrize(
    ("table", "column", "marker", "payload"),
    [
        ("steps", "proprio", 0x14, True),  # the crc's type i32 -> i16 (the tester's flip)
        ("steps", "proprio", 0x35, True),  # field 4 -> field 6, an i32 readers skip
        ("episodes", "step_count", 0x16, True),  # i32 -> i64: pyarrow skips it, reads "no CRC"
        ("episodes", "step_count", 0x16, False),  # only the marker: pyarrow reads the file as fine
    ],
)
def test_a_crc_field_marker_flip_with_a_payload_flip_is_damage_not_unverifiable(
    clean2: tuple[Path, dict[tuple[str, int], Any], list[str]],
    tmp_path: Path,
    table: str,
    column: str,
    marker: int,
    payload: bool,
) -> None:
    from pi_loader import CorruptDataError, Dataset, SampleSpec

    clean_root, clean_samples, episode_ids = clean2
    root = _copy(clean_root, tmp_path)
    path = _newest_file(root, table)
    start, _, body, size = _first_page(path, column)
    data = bytearray(path.read_bytes())
    data[_crc_marker(data, start)] = marker  # a reader now sees a page without a CRC
    if payload:
        data[body + size - 3] ^= 0x10  # and one payload bit of the same page (a value, not the frame)
    path.write_bytes(bytes(data))
    got = read_samples(root)
    errors = [v for v in got.values() if isinstance(v, BaseException)]
    changed = [
        k for k, v in got.items() if not isinstance(v, BaseException) and not same(v, clean_samples[k])
    ]
    assert not changed, f"{len(changed)} samples changed without an error"
    if table == "episodes":  # the markers' file is left out at open, named; the rest reads
        assert not errors and {k[0] for k in got} == set(episode_ids) - _episodes_in(
            clean_root / table / path.name
        )
        with pytest.warns(UserWarning, match=path.name):
            (unreadable,) = Dataset(str(root), spec=SampleSpec(action_horizon=4)).unreadable
        assert path.name in unreadable.file and ("crc" in unreadable.detail.lower() or payload)
    else:
        assert errors and all(isinstance(e, CorruptDataError) for e in errors), errors[:1]
        assert path.name in str(errors[0]) and "episode" in str(errors[0])
    report = _verify_repair_restore(root, clean_samples, "crc marker + payload flip")
    assert any(f.file == path.name and f.table == table for f in report.faults)
    assert "unverifiable" not in "\n".join(report.lines())


def test_every_single_bit_flip_of_a_page_header_is_reported_by_verify_when_the_loader_raises(
    clean2: tuple[Path, dict[tuple[str, int], Any], list[str]], tmp_path: Path
) -> None:
    """Generated: each bit of the header of one steps data page, flipped in turn (in place, the
    file keeps its size). Every read is the clean sample or a CorruptDataError, and whenever
    the loader raises, `pilake verify` reports the file (verify covers what the loader meets)."""
    from pi_loader import Dataset, PiLoaderError, SampleSpec

    clean_root, clean_samples, _ = clean2
    root = _copy(clean_root, tmp_path)
    path = _newest_file(root, "steps")
    episode = str(pq.read_table(path, columns=["episode_id"]).column(0)[0])
    want = {k: v for k, v in clean_samples.items() if k[0] == episode}
    start, header_bytes, _, _ = _first_page(path, "proprio")
    clean_bytes = path.read_bytes()
    outcomes = {"raised": 0, "harmless": 0}
    problems: list[str] = []
    for n, (byte, bit) in enumerate((b, i) for b in range(start, start + header_bytes) for i in range(8)):
        moved = root.with_name(f"lake-{n}")  # a fresh lake root: no host index of another flip
        root.rename(moved)
        root = moved
        data = bytearray(clean_bytes)
        data[byte] ^= 1 << bit
        (root / "steps" / path.name).write_bytes(bytes(data))
        raised: list[BaseException] = []
        try:
            ds = Dataset(str(root), episode_ids=[episode], spec=SampleSpec(action_horizon=4))
            for i in range(len(ds)):
                try:
                    sample = ds[i]
                except PiLoaderError as err:
                    raised.append(err)
                    continue
                key = (str(sample["episode_id"]), int(np.asarray(sample["step"])))
                if not same(sample, want[key]):
                    problems.append(f"byte {byte - start} bit {bit}: sample {key} changed without an error")
        except PiLoaderError as err:
            raised.append(err)
        wrong_kind = [e for e in raised if type(e).__name__ != "CorruptDataError"]
        if wrong_kind:
            problems.append(f"byte {byte - start} bit {bit}: {type(wrong_kind[0]).__name__}: {wrong_kind[0]}")
        report = verify_lake(report_layout(root), VerifyConfig(tables=("steps",)))
        if raised and not any(f.file == path.name for f in report.faults):
            problems.append(f"byte {byte - start} bit {bit}: the loader raised, verify found nothing")
        outcomes["raised" if raised else "harmless"] += 1
    print(f"page header flips ({header_bytes} bytes): {outcomes}")
    assert not problems, "\n".join(problems[:20])
    assert outcomes["raised"] > 0


def test_a_deleted_newest_episodes_commit_is_found_by_verify_and_rebuilt(
    clean2: tuple[Path, dict[tuple[str, int], Any], list[str]], tmp_path: Path
) -> None:
    clean_root, clean_samples, _ = clean2
    root = _copy(clean_root, tmp_path)
    lost = _episodes_in(_newest_file(root, "episodes"))
    (root / "episodes" / "_delta_log" / f"{2:020d}.json").unlink()
    report = verify_lake(report_layout(root), VerifyConfig())
    assert report.exit_code == 2
    assert {e["episode_id"] for e in report.corrupt_episodes} == lost
    assert all(f.kind == "lost_commit" for f in report.faults), [f.as_dict() for f in report.faults]
    repaired = repair_lake(report_layout(root), report, RepairConfig())
    assert {r["episode_id"] for r in repaired.repaired} == lost and repaired.exit_code == 0
    _assert_restored(root, clean_samples, "deleted episodes commit")
    assert verify_lake(report_layout(root), VerifyConfig()).exit_code == 0


@pytest.mark.parametrize("damage", ["truncated", "zeroed"])
def test_a_damaged_episodes_file_costs_its_episodes_not_the_lake(
    clean2: tuple[Path, dict[tuple[str, int], Any], list[str]], tmp_path: Path, damage: str
) -> None:
    from pi_loader import DamagedLakeWarning, Dataset, SampleSpec

    clean_root, clean_samples, episode_ids = clean2
    root = _copy(clean_root, tmp_path)
    path = _newest_file(root, "episodes")
    lost = _episodes_in(path)
    size = path.stat().st_size
    path.write_bytes(path.read_bytes()[: size // 2] if damage == "truncated" else bytes(size))
    with pytest.warns(DamagedLakeWarning, match=path.name):
        ds = Dataset(str(root), spec=SampleSpec(action_horizon=4))
    assert set(ds.episode_ids) == set(episode_ids) - lost
    (unreadable,) = ds.unreadable
    assert unreadable.table == "episodes" and path.name in unreadable.file
    for i in range(len(ds)):  # what it still holds reads as in the clean lake
        sample = ds[i]
        assert same(sample, clean_samples[(str(sample["episode_id"]), int(np.asarray(sample["step"])))])
    report = _verify_repair_restore(root, clean_samples, f"{damage} episodes file")
    assert {e["episode_id"] for e in report.corrupt_episodes} == lost


@pytest.mark.parametrize("table", ["steps", "video", "episodes"])
def test_an_invalid_json_commit_after_the_checkpoint_costs_nothing_and_repair_rebuilds_the_log(
    clean2: tuple[Path, dict[tuple[str, int], Any], list[str]], tmp_path: Path, table: str
) -> None:
    from deltalake import DeltaTable
    from pi_loader import DamagedLakeWarning, Dataset, SampleSpec

    clean_root, clean_samples, episode_ids = clean2
    root = _copy(clean_root, tmp_path)
    added = _episodes_in(_newest_file(root, "episodes"))  # by the commit damaged below
    DeltaTable(str(root / table), version=1).create_checkpoint()
    assert (root / table / "_delta_log" / f"{1:020d}.checkpoint.parquet").exists()
    (root / table / "_delta_log" / f"{2:020d}.json").write_text('{"add": {"path": "part-\n')
    with pytest.warns(DamagedLakeWarning, match=f"{table}.*do not load"):
        ds = Dataset(str(root), spec=SampleSpec(action_horizon=4))
    # steps, video: nothing lost (samples reach their files through the markers' locators);
    # episodes: the markers that commit added
    assert set(ds.episode_ids) == set(episode_ids) - (added if table == "episodes" else set())
    assert ds.table_versions[table] == 1
    for i in range(len(ds)):
        sample = ds[i]
        assert same(sample, clean_samples[(str(sample["episode_id"]), int(np.asarray(sample["step"])))])
    report = _verify_repair_restore(root, clean_samples, f"invalid {table} commit")
    assert any(f.kind == "delta_log" and f.table == table for f in report.faults)
    assert (root / table / "_delta_log_damaged" / f"{2:020d}.json").exists()  # kept, not deleted
    if table != "episodes":
        assert DeltaTable(str(root / table)).version() == 2  # the orphaned file added back
    else:  # its markers' episodes were rebuilt from raw, not an orphan made visible again
        assert {e["episode_id"] for e in report.corrupt_episodes} >= added


@pytest.mark.parametrize("table", ["steps", "video"])
@pytest.mark.parametrize("damage", ["truncated", "footer"])
def test_a_damaged_footer_or_truncated_file_is_skipped_by_skip_mode_and_repaired(
    clean2: tuple[Path, dict[tuple[str, int], Any], list[str]], tmp_path: Path, table: str, damage: str
) -> None:
    from pi_loader import CorruptDataError, Dataset, Loader, SampleSpec, ShardSpec

    clean_root, clean_samples, _ = clean2
    root = _copy(clean_root, tmp_path)
    path = _newest_file(root, table)
    lost = _episodes_in(path)
    data = bytearray(path.read_bytes())
    if damage == "truncated":
        data = data[: len(data) * 2 // 3]
    else:  # the footer's length field: the footer no longer parses
        data[-8:-4] = (0x7FFFFFF0).to_bytes(4, "little")
    path.write_bytes(bytes(data))
    ds = Dataset(str(root), spec=SampleSpec(action_horizon=4))
    errors = []
    for i in range(len(ds)):
        try:
            ds[i]
        except CorruptDataError as err:
            errors.append(err)
    assert errors, "the damaged file read without an error"
    assert all(e.where["table"] == table and path.name in str(e.where["file"]) for e in errors)
    assert {str(e.where["episode_id"]) for e in errors} == lost
    loader = Loader(ds, batch_size=8, shard=ShardSpec(0, 1), num_workers=0, on_corrupt="skip")
    got = {}
    for batch in loader:
        for k, (e, s) in enumerate(zip(batch["episode_id"], batch["step"], strict=True)):
            got[(str(e), int(s))] = {name: value[k] for name, value in batch.items()}
    assert {k[0] for k in got} == {k[0] for k in clean_samples} - lost
    assert set(got) == {k for k in clean_samples if k[0] not in lost}
    assert loader.stats().corrupt_skipped == len(clean_samples) - len(got)
    loader.close()
    report = _verify_repair_restore(root, clean_samples, f"{damage} {table} file")
    assert {e["episode_id"] for e in report.corrupt_episodes} == lost
