"""Fault tests: real processes (Tansu broker, `pilake stream` with its Flink JVM and Python
workers, Delta writers) are broken on purpose; each test ends with the audit showing nothing
lost and nothing duplicated. The scenarios live in `pi_jobs.local.faults`, which the fault report
(`python benchmarks/faults/run.py`) runs too.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from pi_jobs.local.faults import (
    CRASH_POINTS,
    KCAT_GARBAGE,
    FaultResult,
    bad_bytes,
    broker_restart,
    concurrent_writers,
    crash_point,
    kill_stream_job,
    lake_unwritable,
)
from pi_jobs.stream.job import RESTART_ATTEMPTS

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def jar_cache(stack_settings: Any) -> Path:
    return Path(stack_settings.jar_dir)


def assert_nothing_lost_or_doubled(result: FaultResult) -> None:
    print(result.row(), dict(result.observed))
    assert result.lost == 0, f"lost episodes: {result.audit['missing_ids']}"
    assert result.duplicated == 0, f"duplicated episodes: {result.audit['duplicated_ids']}"
    assert result.audit["ok"], result.audit
    assert result.episodes_in == result.visible + result.quarantined


# Bad bytes that leave intact chunks of their episode in the job (a corrupted chunk, a truncated
# first chunk) leave that episode incomplete: SPEC 7.5 gives the bad message a row of its own and
# lets its episode carry on, and SPEC 9.4 quarantines the still incomplete episode again, as
# `incomplete_timeout`, once no chunk of it has come for `incomplete_timeout_s`. Whether the job
# gets there before the scenario stops it depends on the machine's load (it did on a loaded 2-core
# machine), so that one extra reason is allowed for those episodes, and for no other.
INCOMPLETE_AFTER = {"chunk_checksum", "truncated"}


def assert_reasons_as_the_spec_allows(
    expected: dict[str, str], left_incomplete: list[str], reasons: dict[str, list[str]]
) -> None:
    """Each bad episode has its expected reason, plus at most `incomplete_timeout` if its intact
    chunks were left waiting in the job; the garbage is `bad_magic` and nothing else."""
    assert {expected[e] for e in left_incomplete} == INCOMPLETE_AFTER, (left_incomplete, expected)
    for episode_id, reason in expected.items():
        allowed = {reason, "incomplete_timeout"} if episode_id in left_incomplete else {reason}
        got = set(reasons.get(episode_id, []))
        assert reason in got and got <= allowed, (episode_id, reason, reasons)
    assert reasons["<no id>"] == ["bad_magic"]


def test_sigkill_of_the_stream_job_mid_run(tmp_path: Path, jar_cache: Path) -> None:
    r = kill_stream_job(tmp_path / "home", jar_cache)
    assert_nothing_lost_or_doubled(r)
    o = r.observed
    assert 2 <= o["committed_when_killed"] < o["episodes"], "the kill must land mid-run"
    assert o["processes_killed"] >= 3  # driver, Flink JVM, Python worker
    assert o["processes_surviving_kill"] == 0
    assert r.visible == o["episodes"] and r.quarantined == 0


def test_broker_restart_while_uploaders_run(tmp_path: Path, jar_cache: Path) -> None:
    r = broker_restart(tmp_path / "home", jar_cache)
    assert_nothing_lost_or_doubled(r)
    o = r.observed
    assert 1 <= o["committed_before_restart"] < o["episodes"]
    assert o["left_in_spools"] == 0
    assert r.visible == o["episodes"]


def test_bad_bytes_are_quarantined_and_the_job_keeps_running(tmp_path: Path, jar_cache: Path) -> None:
    # a missing kcat fails (setup.sh installs it): a skipped fault test is not a passed one
    assert shutil.which("kcat") or shutil.which("kafkacat"), (
        "kcat is not installed: run `sudo apt-get install -y kcat` (scripts/setup.sh installs it)"
    )
    r = bad_bytes(tmp_path / "home", jar_cache)
    assert_nothing_lost_or_doubled(r)
    o = r.observed
    assert o["stream_job_alive_after"]
    assert o["good_committed"] == o["good_episodes"] == r.visible
    assert_reasons_as_the_spec_allows(o["expected_reasons"], o["left_incomplete"], o["quarantine_reasons"])
    # garbage has no episode id: quarantined by offset (SPEC 7.5), one counting key per record
    assert r.audit["quarantined_records_without_id"] == r.audit["quarantined_without_id"] == len(KCAT_GARBAGE)
    # one counting key per episode (SPEC 7.5), however many rows it has: counted once each
    assert r.quarantined == len(o["expected_reasons"]) + len(KCAT_GARBAGE)
    assert o["quarantine_rows"] >= r.quarantined


def test_two_writers_commit_to_the_same_tables_at_once(tmp_path: Path, jar_cache: Path) -> None:
    r = concurrent_writers(tmp_path / "home", jar_cache)
    assert_nothing_lost_or_doubled(r)
    o = r.observed
    assert o["writer_exit_codes"] == [0, 0]
    assert r.visible == o["episodes"]
    # 3 episodes were given to both writers: each committed once, refused once
    assert o["commits_refused_as_already_committed"] == o["commits_attempted"] - o["episodes"]
    # both read the lake before either committed its markers: one lost Delta's conflict check,
    # re-read what the other committed and committed only the rest
    assert o["commit_races_lost"] >= 1


def test_unwritable_lake_fails_loudly_then_resumes(tmp_path: Path, jar_cache: Path) -> None:
    r = lake_unwritable(tmp_path / "home", jar_cache)
    assert_nothing_lost_or_doubled(r)
    o = r.observed
    assert o["failed_job_exit_code"] != 0
    # Flink's bounded restarts in a row, then a loud exit
    assert 1 <= o["flink_restarts_before_failing"] <= RESTART_ATTEMPTS
    assert o["failed_job_says_failed"] and o["failed_job_names_lake_path"], o["failed_job_error"]
    assert o["acked_while_unwritable"] == 0
    assert r.visible == o["episodes"]


@pytest.mark.parametrize("point", sorted(CRASH_POINTS))
def test_worker_dies_at_a_crash_point_of_the_group_commit(
    point: str, tmp_path: Path, jar_cache: Path
) -> None:
    r = crash_point(tmp_path / "home", jar_cache, point)
    assert_nothing_lost_or_doubled(r)
    o = r.observed
    stage, parallelism, subtask, _ = CRASH_POINTS[point]
    assert o["parallelism"] == parallelism
    assert o["crashed"]["stage"] == stage, "the worker must have died at that point"
    if subtask is not None:
        assert o["crashed"]["subtask"] == subtask
    if point == "mid_group":
        assert o["crashed"]["group_episodes"] >= 2, "the crash must hit a group of several episodes"
    if point == "held_across_checkpoints":
        # only Flink's restore (its replay, and the sink's read-back of what it held) delivered
        assert o["resent_episodes"] == 0, o
        assert o["crashed"]["group_episodes"] == o["episodes"], "all held for one group commit"
        assert o["recovered_after_restart"] >= 1, "the held episodes came back through _held"
    assert o["flink_restarts"] >= 1
    assert r.visible == o["episodes"] and r.quarantined == 0
