"""Batch validation: real Delta lakes from the factory, real great-expectations, real Data Docs."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from pi_jobs.cli import main
from pi_jobs.ops.validation import ValidationSetupError, load_frame, validate_table

from tests.fixtures import lake_factory as lf

pytest.importorskip("great_expectations")


@pytest.fixture(scope="module")
def clean_lake(tmp_path_factory: pytest.TempPathFactory) -> lf.FakeLake:
    return lf.write_lake(
        tmp_path_factory.mktemp("lake"), episodes=4, steps=8, cameras=("front",), size=(16, 16)
    )


def _lake(tmp_path: Path) -> lf.FakeLake:
    return lf.write_lake(tmp_path / "lake", episodes=3, steps=6, cameras=("front",), size=(16, 16))


def _failed(report) -> set[tuple[str, str | None]]:
    return {(o.expectation, o.column) for o in report.failed}


def test_clean_lake_passes_both_suites_and_renders_data_docs(clean_lake, tmp_path):
    root = clean_lake.layout.root
    for table, rows in (("episodes", 4), ("steps", 4 * 8)):
        report = validate_table(root, table, validation_dir=tmp_path / "validation")
        assert report.success, [o.describe() for o in report.failed]
        assert report.rows == rows
        assert len(report.outcomes) > 20
        assert report.docs_index is not None and report.docs_index.is_file()
    # the factory's garbage attempts are invisible, hence skipped, not validated
    assert report.skipped_rows == 2 * 8
    docs_index = report.docs_index
    assert docs_index is not None
    index = docs_index.read_text()
    assert "pilake.episodes" in index and "pilake.steps" in index
    pages = list((docs_index.parent / "validations").rglob("*.html"))
    assert any("steps@v" in str(p) for p in pages)


def test_duplicate_episode_and_negative_step_count_fail_by_name(tmp_path):
    lake = _lake(tmp_path)
    fakes = [lake.episodes[i] for i in lake.episode_ids]
    good_version = DeltaTable(lake.layout.episodes).version()  # before the bad rows
    duplicate = lf.episode_rows(fakes[:1])
    write_deltalake(lake.layout.episodes, duplicate, mode="append")
    negative = lf.episode_rows([dataclasses.replace(fakes[1], episode_id="ep-neg", attempt_id="a-neg")])
    negative = negative.set_column(
        negative.schema.get_field_index("step_count"), "step_count", pa.array([-5], pa.int32())
    )
    write_deltalake(lake.layout.episodes, negative, mode="append")

    report = validate_table(lake.layout.root, "episodes", validation_dir=tmp_path / "v")
    assert not report.success
    failed = _failed(report)
    assert ("expect_column_values_to_be_unique", "episode_id") in failed
    assert ("expect_compound_columns_to_be_unique", "episode_id,attempt_id") in failed
    assert ("expect_column_values_to_be_between", "step_count") in failed
    # -5 steps at 10 Hz is not the declared duration either
    assert ("expect_column_values_to_be_between", "duration_s__error") in failed
    assert len(failed) == 4, failed
    # time travel: the version before the bad rows passes
    old = validate_table(lake.layout.root, "episodes", validation_dir=tmp_path / "v", version=good_version)
    assert old.success and old.version == good_version


def test_nan_proprio_and_timestamp_disorder_fail_the_steps_suite(tmp_path):
    lake = _lake(tmp_path)
    ep = lf.make_episode(7, steps=5, cameras=("front",), size=(16, 16), seed=3)
    ep = dataclasses.replace(ep, episode_id="ep-bad", attempt_id="a-bad")
    ep.proprio[2, 1] = np.nan
    steps, _ = lf._rows(
        ep.episode_id, ep.attempt_id, ep.proprio, ep.action, ep.camera_frame_index, {}, (16, 16)
    )
    ts = steps.column("timestamp_ns").to_numpy().copy()
    ts[3], ts[4] = ts[4], ts[3]  # step 3 after step 4 in time
    steps = steps.set_column(steps.schema.get_field_index("timestamp_ns"), "timestamp_ns", pa.array(ts))
    write_deltalake(lake.layout.steps, steps, mode="append")
    write_deltalake(lake.layout.episodes, lf.episode_rows([ep]), mode="append")

    steps_report = validate_table(lake.layout.root, "steps", validation_dir=tmp_path / "v")
    failed = _failed(steps_report)
    assert ("expect_column_values_to_be_in_set", "proprio__finite") in failed
    assert ("expect_column_values_to_be_between", "timestamp_ns__delta") in failed
    assert ("expect_column_values_to_be_in_set", "action__finite") not in failed
    nan = next(o for o in steps_report.failed if o.column == "proprio__finite")
    assert nan.unexpected_count == 1
    # the episode row's statistics were computed from the NaN proprio: the episodes suite sees it
    ep_report = validate_table(lake.layout.root, "episodes", validation_dir=tmp_path / "v")
    assert ("expect_column_values_to_be_in_set", "proprio_stats__finite") in _failed(ep_report)


def test_list_length_mismatch_and_missing_steps(tmp_path):
    lake = _lake(tmp_path)
    ep = lf.make_episode(8, steps=4, cameras=("front",), size=(16, 16), seed=1)
    ep = dataclasses.replace(ep, episode_id="ep-short", attempt_id="a-short")
    steps, _ = lf._rows(
        ep.episode_id, ep.attempt_id, ep.proprio, ep.action, ep.camera_frame_index, {}, (16, 16)
    )
    proprio = pa.array([row[:2] for row in steps.column("proprio").to_pylist()], pa.list_(pa.float32()))
    steps = steps.set_column(steps.schema.get_field_index("proprio"), "proprio", proprio)
    write_deltalake(lake.layout.steps, steps.slice(0, 3), mode="append")  # 3 of 4 steps stored
    write_deltalake(lake.layout.episodes, lf.episode_rows([ep]), mode="append")
    failed = _failed(validate_table(lake.layout.root, "steps", validation_dir=tmp_path / "v"))
    assert ("expect_column_pair_values_to_be_equal", "proprio__len,episode__proprio_dim") in failed
    assert ("expect_column_pair_values_to_be_equal", "episode__step_rows,episode__step_count") in failed


def test_frame_has_exactly_the_expected_columns(clean_lake):
    for table in ("episodes", "steps"):
        prepared = load_frame(clean_lake.layout.root, table)
        assert tuple(sorted(prepared.frame.columns)) == tuple(sorted(prepared.expected_columns))


def test_unknown_table_and_bad_version_are_setup_errors(clean_lake, tmp_path):
    with pytest.raises(ValidationSetupError, match="no expectation suite for table 'video'"):
        validate_table(clean_lake.layout.root, "video", validation_dir=tmp_path)
    with pytest.raises(ValidationSetupError, match="version 99"):
        validate_table(clean_lake.layout.root, "episodes", validation_dir=tmp_path, version=99)


def test_cli_validate_exit_codes_and_docs_path(tmp_path, monkeypatch, capsys):
    lake = _lake(tmp_path)
    monkeypatch.setenv("PILAKE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PILAKE_LAKE", lake.layout.root)
    assert main(["validate", "episodes"]) == 0
    out = capsys.readouterr().out
    assert "passed" in out and "index.html" in out
    docs = Path(out.split("Data Docs: ")[1].split()[0])
    assert docs.is_file() and docs.is_relative_to(tmp_path / "home" / "validation")
    good_version = DeltaTable(lake.layout.episodes).version()
    write_deltalake(lake.layout.episodes, lf.episode_rows([lake.episodes["ep-000"]]), mode="append")
    assert main(["validate", "episodes"]) == 2
    out = capsys.readouterr().out
    assert "FAIL expect_column_values_to_be_unique on episode_id" in out
    assert main(["validate", "episodes", "--version", str(good_version)]) == 0
