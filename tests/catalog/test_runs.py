"""The catalog's training runs (pi_catalog._runs) against a real embedded ClickHouse (chdb).

Hostile run ids, pin names and out dirs (quotes, backslashes, SQL comments and statements,
ClickHouse parameter syntax, control characters, unicode, 10 KB) are stored and found exactly:
values travel as insert columns and query parameters, never as SQL text.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest
from pi_catalog import (
    Catalog,
    TrainingRun,
    live_run_reads,
    record_run_reads,
    record_training_run,
    training_runs,
)

FRAGMENTS = [
    "'",
    '"',
    "\\",
    "\\'",
    "`",
    "; DROP TABLE training_runs; --",
    "' OR 1=1 --",
    "{pin:String}",
    "{run_id:String}",
    "%s",
    "\x00",
    "\n",
    "\r\t",
    "/* */",
    "ü",
    "名前",
    "🤖",
    "\u202e",  # right-to-left override
    "e\u0301",  # a combining accent
    "$$",
    "\x7f",
]


def _hostile(rng: random.Random, n: int) -> list[str]:
    out = ["x" * 10_240, "'" * 10_240, "🤖" * 2_560, "".join(FRAGMENTS)]
    while len(out) < n:
        out.append("".join(rng.choice(FRAGMENTS) for _ in range(rng.randint(1, 8))) + f"#{len(out)}")
    return out


def _run(
    run_id: str, pin: str, *, status: str = "running", beat: int | None = None, **kw: object
) -> TrainingRun:
    now = time.time_ns()
    return TrainingRun(
        run_id=run_id,
        status=status,
        started_at_ns=now,
        heartbeat_at_ns=beat or now,
        finished_at_ns=0 if status == "running" else (beat or now),
        pin_names=(pin,),
        content_hashes=("h-" + pin[:8],),
        **kw,  # type: ignore[arg-type]
    )


@pytest.fixture
def catalog(tmp_path: Path) -> Catalog:
    return Catalog(str(tmp_path / "catalog"))


def test_hostile_run_ids_pin_names_and_out_dirs_are_stored_and_found_exactly(catalog: Catalog) -> None:
    values = _hostile(random.Random(3434), 40)
    runs = [_run(v, values[-1 - i], out_dir=v[::-1], git_commit=v) for i, v in enumerate(values)]
    for run in runs:
        record_training_run(catalog, run)
    stored = {r.run_id: r for r in training_runs(catalog)}
    assert len(stored) == len(runs)  # nothing dropped, nothing added by a statement in a value
    for run in runs:
        assert stored[run.run_id] == run
        assert training_runs(catalog, run_id=run.run_id) == [run]
        assert run in training_runs(catalog, pin=run.pin_names[0])
    assert training_runs(catalog, pin="' OR 1=1 --") == []


def test_a_heartbeat_replaces_the_row_and_only_fresh_running_runs_are_live(catalog: Catalog) -> None:
    now = time.time_ns()
    for beat in (now - 3_000, now - 2_000, now - 1_000):
        record_training_run(catalog, _run("r'1", "p", beat=beat))
    (row,) = training_runs(catalog)
    assert row.heartbeat_at_ns == now - 1_000
    record_run_reads(catalog, "r'1", ["ep-1", "ep-2"], ["a1", "a2"], at_ns=now)
    record_training_run(catalog, _run("stale", "p", beat=now - 601 * 10**9))
    record_training_run(catalog, _run("done", "p", status="finished"))
    (live,) = live_run_reads(catalog, now)
    assert (live.run_id, live.episode_ids, live.attempt_ids) == ("r'1", ("ep-1", "ep-2"), ("a1", "a2"))
    assert [r.run_id for r in live_run_reads(catalog, now, window_s=1e6)] == ["r'1", "stale"]
    record_training_run(catalog, _run("r'1", "p", status="preempted", beat=now))
    assert [r.run_id for r in live_run_reads(catalog, now, window_s=1e6)] == ["stale"]
    assert {r.status for r in training_runs(catalog, pin="p")} == {"preempted", "running", "finished"}


@pytest.mark.parametrize(
    ("changes", "error"),
    [
        ({"run_id": ""}, "run_id must be a non-empty string"),
        ({"status": "done'; --"}, "status must be one of"),
        ({"content_hashes": ("a", "b")}, "one content hash per pin name"),
        ({"host_count": True}, "host_count must be an int"),
        ({"out_dir": b"/bytes"}, "out_dir must be a str"),
        ({"out_dir": "\ud800"}, "out_dir is not valid unicode"),
    ],
)
def test_a_bad_run_row_is_refused_with_what_was_wrong(changes: dict[str, object], error: str) -> None:
    fields: dict[str, object] = {
        "run_id": "r",
        "status": "running",
        "started_at_ns": 1,
        "heartbeat_at_ns": 1,
        "pin_names": ("p",),
        "content_hashes": ("h",),
    }
    with pytest.raises((ValueError, TypeError), match=error):
        TrainingRun(**{**fields, **changes})  # type: ignore[arg-type]
