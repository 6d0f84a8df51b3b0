"""pi_jobs.integrity: `pilake verify` (states, sample, resume, unverifiable files, missing files,
exit codes, the JSON report) and `pilake repair` (idempotent; the CLI), and the writers that keep
page CRCs (compaction's bin-packing). The flip-everything test is tests/faults/test_corruption.py.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pi_format import LakeLayout
from pi_format.lake import (
    DELETIONS_SCHEMA,
    WrittenFile,
    check_parquet_file,
    checksums_required,
    commit_actions,
    ensure_lake_tables,
)
from pi_jobs.integrity import RepairConfig, VerifyConfig, VerifyReport, repair_lake, verify_lake
from pi_jobs.integrity import verify as verify_module

from tests.fixtures.raw_lake import write_raw_lake


@pytest.fixture(scope="module")
def clean_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("integrity") / "lake"
    write_raw_lake(root, robots=1, episodes_per_robot=2)
    return root


@pytest.fixture
def lake(clean_root: Path, tmp_path: Path) -> LakeLayout:
    shutil.copytree(clean_root, tmp_path / "lake")
    return LakeLayout(str(tmp_path / "lake"))


def _flip_steps(layout: LakeLayout) -> str:
    (path,) = sorted(Path(layout.steps).glob("*.parquet"))
    metadata = pq.ParquetFile(path).metadata
    column = metadata.row_group(0).column(4)  # proprio
    data = bytearray(path.read_bytes())
    data[column.data_page_offset + column.total_compressed_size - 7] ^= 0x41
    path.write_bytes(bytes(data))
    return path.name


def test_a_clean_lake_verifies_ok_and_writes_its_report(lake: LakeLayout, tmp_path: Path) -> None:
    state, report_path = tmp_path / "state.json", tmp_path / "report.json"
    report = verify_lake(lake, VerifyConfig(state_path=state, report_path=report_path))
    assert report.exit_code == 0 and not report.faults
    assert {t: s for t, s in report.status.items() if t in ("raw", "steps", "video", "episodes")} == {
        t: {"ok": 1} for t in ("raw", "steps", "video", "episodes")
    }
    assert report.bytes_checked > 0 and report.files_checked == report.files_selected
    assert not state.exists()  # complete: the next run starts over
    doc = json.loads(report_path.read_text())
    assert doc["corrupt"] is False and VerifyReport.from_dict(doc).files_selected == report.files_selected


def test_a_damaged_page_names_file_row_group_column_and_episode(lake: LakeLayout, tmp_path: Path) -> None:
    name = _flip_steps(lake)
    report = verify_lake(lake, VerifyConfig(report_path=tmp_path / "r.json"))
    assert report.exit_code == 2
    (fault,) = report.faults
    assert (fault.table, fault.file, fault.row_group, fault.kind) == ("steps", name, 0, "page_crc")
    assert fault.column is not None and fault.column.startswith("proprio")
    first = str(pq.read_table(Path(lake.steps) / name, columns=["episode_id"]).column(0)[0])
    assert [e["episode_id"] for e in report.corrupt_episodes] == [first]
    assert report.corrupt_episodes[0]["visible"] is True
    assert any("CORRUPT steps/" + name in line for line in report.lines())
    assert json.loads((tmp_path / "r.json").read_text())["corrupt_episodes"][0]["episode_id"] == first


def test_a_killed_scrub_resumes_where_it_stopped(
    lake: LakeLayout, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / "state.json"
    config = VerifyConfig(state_path=state)
    real = verify_module.check_file
    calls = []

    def dies_on_the_third(*args: object, **kwargs: object) -> object:
        calls.append(args)
        if len(calls) == 3:
            raise KeyboardInterrupt  # killed mid-run
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(verify_module, "check_file", dies_on_the_third)
    monkeypatch.setattr(verify_module, "_STATE_EVERY_S", 0.0)
    with pytest.raises(KeyboardInterrupt):
        verify_lake(lake, config)
    assert len(json.loads(state.read_text())["files"]) == 2
    monkeypatch.setattr(verify_module, "check_file", real)
    report = verify_lake(lake, config)
    assert report.files_resumed == 2 and report.files_checked == report.files_selected - 2
    assert report.exit_code == 0


def test_a_sample_is_deterministic_and_a_fraction() -> None:
    config = VerifyConfig(sample=0.3, seed=7)
    paths = [f"part-{i}.parquet" for i in range(2000)]
    chosen = [p for p in paths if config.selects("steps", p)]
    assert 450 < len(chosen) < 750
    assert chosen == [p for p in paths if VerifyConfig(sample=0.3, seed=7).selects("steps", p)]
    assert chosen != [p for p in paths if VerifyConfig(sample=0.3, seed=8).selects("steps", p)]
    with pytest.raises(ValueError, match="sample must be a fraction"):
        VerifyConfig(sample=0.0)
    with pytest.raises(ValueError, match="tables must be among"):
        VerifyConfig(tables=("nope",))


def _add_file_without_crcs(lake: LakeLayout, table: object) -> None:
    rows = pa.table(
        {"episode_id": ["x"], "deletion_id": ["d"], "reason": ["r"], "selection": ["s"], "deleted_at_ns": [1]}
    )
    path = Path(lake.deletions) / "part-old.parquet"
    pq.write_table(rows.cast(DELETIONS_SCHEMA), path)  # no page CRCs (pyarrow's default)
    written = WrittenFile("part-old.parquet", path.stat().st_size, 1, json.dumps({"numRecords": 1}))
    commit_actions(table, "deletions", adds=[written])


def test_files_written_without_checksums_are_unverifiable_not_ok(lake: LakeLayout) -> None:
    from deltalake import DeltaTable

    # a table as a lake made before 2026-11-27 holds it: no record that its files carry CRCs
    shutil.rmtree(lake.deletions)
    _add_file_without_crcs(lake, DeltaTable.create(lake.deletions, schema=DELETIONS_SCHEMA))
    report = verify_lake(lake, VerifyConfig(tables=("deletions",)))
    assert report.status == {"deletions": {"unverifiable": 1}} and report.exit_code == 0
    assert "unverifiable" in report.lines()[-1]


def test_a_page_without_a_crc_in_a_table_that_records_crcs_is_damage(lake: LakeLayout) -> None:
    # the lake made the table: its Delta metadata records that every file carries page CRCs
    table = ensure_lake_tables(lake)["deletions"]
    assert checksums_required(table.metadata().description)
    _add_file_without_crcs(lake, table)
    report = verify_lake(lake, VerifyConfig(tables=("deletions",)))
    assert report.status == {"deletions": {"corrupt": 1}} and report.exit_code == 2
    assert "page has no CRC" in report.faults[0].detail


def test_a_file_the_log_names_but_is_gone_is_corrupt(lake: LakeLayout) -> None:
    (path,) = sorted(Path(lake.video).glob("*.parquet"))
    path.unlink()
    report = verify_lake(lake, VerifyConfig(tables=("video",)))
    assert report.exit_code == 2 and [f.kind for f in report.faults] == ["missing"]


def test_repair_twice_changes_nothing_the_second_time(lake: LakeLayout) -> None:
    _flip_steps(lake)
    report = verify_lake(lake, VerifyConfig())
    first = repair_lake(lake, report, RepairConfig())
    assert len(first.repaired) == 1 and first.exit_code == 0 and first.files_rewritten
    again = repair_lake(lake, report, RepairConfig())  # the same (stale) report
    assert not again.repaired and again.already_done == [first.repaired[0]["episode_id"]]
    assert verify_lake(lake, VerifyConfig()).exit_code == 0


def test_the_cli_verifies_repairs_and_exits_2_on_damage(
    lake: LakeLayout, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from pi_jobs.cli import main

    home = tmp_path / "home"
    monkeypatch.setenv("PILAKE_HOME", str(home))
    monkeypatch.setenv("PILAKE_LAKE", lake.root)
    assert main(["verify", "--no-progress"]) == 0
    _flip_steps(lake)
    assert main(["verify", "--no-progress"]) == 2
    out = capsys.readouterr().out
    assert "CORRUPT steps/" in out and "run `pilake repair`" in out
    assert main(["repair", "--report", str(home / "verify" / "report.json"), "--no-catalog"]) == 0
    assert "1 repaired" in capsys.readouterr().out
    assert main(["verify", "--no-progress"]) == 0


def test_compaction_bin_packs_raw_with_page_crcs(lake: LakeLayout) -> None:
    from pi_jobs.maintenance import CompactConfig, compact

    write_raw_lake(Path(lake.root), robots=1, episodes_per_robot=1, seed=12)  # a second raw file
    assert len(list(Path(lake.raw).glob("*.parquet"))) == 2
    compact(lake, CompactConfig(binpack_tables=("raw",)))
    from deltalake import DeltaTable

    (uri,) = DeltaTable(lake.raw).file_uris()
    check = check_parquet_file(uri.removeprefix("file://"))
    assert check.status == "ok" and check.pages_without_crc == 0
    assert verify_lake(lake, VerifyConfig(tables=("raw",))).exit_code == 0


def test_a_dry_run_says_what_repair_would_do_and_changes_nothing(lake: LakeLayout) -> None:
    from deltalake import DeltaTable

    _flip_steps(lake)
    report = verify_lake(lake, VerifyConfig())
    versions = {t: DeltaTable(lake.table(t)).version() for t in ("episodes", "steps", "video", "quarantine")}
    planned = repair_lake(lake, report, RepairConfig(dry_run=True))
    assert [r["episode_id"] for r in planned.repaired] == [e["episode_id"] for e in report.corrupt_episodes]
    assert planned.repaired[0]["new_attempt"] is None and not planned.files_rewritten
    assert {t: DeltaTable(lake.table(t)).version() for t in versions} == versions
    assert verify_lake(lake, VerifyConfig()).exit_code == 2


def test_a_commit_missing_from_a_log_is_a_lost_commit(lake: LakeLayout) -> None:
    log = Path(lake.raw) / "_delta_log"
    (log / f"{0:020d}.json").unlink()  # the table's creation: a gap below its newest commit
    report = verify_lake(lake, VerifyConfig(tables=("raw",)))
    assert report.exit_code == 2
    lost = [f for f in report.faults if f.kind == "lost_commit"]
    assert [(f.table, f.file) for f in lost] == [("raw", f"_delta_log/{0:020d}.json")]
    assert "missing" in lost[0].detail


def test_an_episode_with_rows_but_no_marker_is_found_and_rebuilt(lake: LakeLayout) -> None:
    from deltalake import DeltaTable
    from pi_format.lake._commit import file_sizes

    episodes = DeltaTable(lake.episodes)
    ((path, size),) = file_sizes(episodes).items()
    ids = set(pq.read_table(Path(lake.episodes) / path, columns=["episode_id"]).column(0).to_pylist())
    commit_actions(episodes, "episodes", removes=[(path, size)])  # the markers gone, rows kept
    report = verify_lake(lake, VerifyConfig())
    assert {e["episode_id"] for e in report.corrupt_episodes} == ids
    assert all(e["vanished"] for e in report.corrupt_episodes)
    assert {f.kind for f in report.faults} == {"lost_commit"}
    result = repair_lake(lake, report, RepairConfig())
    assert {r["episode_id"] for r in result.repaired} == ids and result.exit_code == 0
    assert verify_lake(lake, VerifyConfig()).exit_code == 0
