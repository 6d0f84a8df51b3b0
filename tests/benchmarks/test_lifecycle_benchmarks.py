"""The lifecycle benchmarks (`benchmarks.lifecycle.compaction`, `benchmarks.lifecycle.backfill_raw`)
on tiny lakes, run as a user runs them. Checks the JSON's shape under the figures rule (legs
interleaved in one run, >= 3 repeats each, every timed figure a median with its spread, ratios
per repeat) and what holds whatever the machine: compaction leaves fewer files and the same
samples; both raw-read legs return every row. No timing asserts.

Tests never import `benchmarks` (pyproject's import contracts): they run its command.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def _run(module: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", module, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return proc


def _is_spread(node: Any, repeats: int) -> bool:
    return (
        isinstance(node, dict)
        and node["repeats"] == repeats == len(node["values"])
        and node["min"] <= node["median"] <= node["max"]
    )


def test_compaction_measures_both_states_interleaved(tmp_path: Path) -> None:
    out = tmp_path / "out"
    # 32 batches, not 8: a warm leg of 8 batches used ~1 clock tick of CPU and measured 0.0 once
    _run(
        "benchmarks.lifecycle.compaction",
        *("--episodes", "32", "--group", "8", "--size-px", "64", "--batches", "32", "--warmup", "2"),
        *("--repeats", "3", "--digests", "4", "--out", str(out)),
    )
    doc = json.loads((out / "compaction.json").read_text())
    assert doc["samples_identical"] == {"checked": 4, "identical": 4, "all": True}
    # both states in every repeat, the order rotated: before first, then after first, ...
    firsts = [entry.split(":")[1] for entry in doc["order"] if entry.endswith(":cold_index")]
    assert firsts == ["before", "after", "after", "before", "before", "after"]
    before, after = doc["before"]["layout"]["tables"], doc["after"]["layout"]["tables"]
    for table in ("steps", "video", "episodes", "raw"):
        assert before[table]["active_files"] == 4 > after[table]["active_files"] >= 1
    for row in doc["comparison"]:
        if row["timed"]:
            assert _is_spread(row["before"], 3) and _is_spread(row["after"], 3), row
            assert _is_spread(row["after_over_before"], 3), row
        else:
            assert isinstance(row["before"], int | float), row
    ratio = doc["after_over_before"]["samples_per_s_warm"]
    b, a = doc["before"]["figures"]["samples_per_s_warm"], doc["after"]["figures"]["samples_per_s_warm"]
    assert [round(x / y, 2) for x, y in zip(a["values"], b["values"], strict=True)] == [
        round(v, 2) for v in ratio["values"]
    ]
    assert "shared" in doc["machine"] and doc["machine"]["load_average_end"]
    assert (out / "compaction.png").stat().st_size > 0
    assert not (out / "lake").exists() and not (out / "lake-compacted").exists()


def test_backfill_raw_interleaves_its_two_legs_per_size(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = _run(
        "benchmarks.lifecycle.backfill_raw", "--groups", "2", "4", "--repeats", "3", "--out", str(out)
    )
    doc = json.loads((out / "backfill_raw.json").read_text())
    assert [r["raw_files"] for r in doc["results"]] == [2, 4]
    for r in doc["results"]:
        # each repeat runs both legs, the order rotated
        whole, planned = "whole_table", "planned_files"
        assert r["order"] == [whole, planned, planned, whole, whole, planned]
        for key in ("whole_table_ms_per_episode", "planned_files_ms_per_episode", "whole_over_planned"):
            assert _is_spread(r[key], 3), (key, r[key])
        assert r["files_per_episode"] == 1.0
    assert doc["config"]["repeats"] == 3 and "shared" in doc["machine"]
    assert (out / "backfill_raw.png").stat().st_size > 0
    assert "planned files" in proc.stdout


def _nodes(node: Any) -> Any:
    yield node
    children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
    for child in children:
        yield from _nodes(child)


def test_the_committed_lifecycle_baselines_hold_spreads_only() -> None:
    """Both baselines measured by the rule: no legacy figure, every spread at least 3 repeats
    whose median, min and max are those of its values, and each timed row's ratio a spread."""
    for name in ("compaction.json", "backfill_raw.json"):
        doc = json.loads((ROOT / "benchmarks" / "baselines" / name).read_text())
        assert "converted" not in doc and "needs_rerun" not in doc, name
        spreads = [n for n in _nodes(doc) if isinstance(n, dict) and "median" in n]
        assert spreads, name
        for s in spreads:
            values = sorted(s["values"])
            assert s["repeats"] == len(values) >= 3, (name, s)
            middle = len(values) // 2
            median = values[middle] if len(values) % 2 else (values[middle - 1] + values[middle]) / 2
            for stated, found in ((s["median"], median), (s["min"], values[0]), (s["max"], values[-1])):
                assert abs(stated - found) <= 1e-3 * abs(found) + 1e-9, (name, s)
        assert not [n for n in _nodes(doc) if isinstance(n, dict) and "legacy" in n], name
    compaction = json.loads((ROOT / "benchmarks" / "baselines" / "compaction.json").read_text())
    for row in compaction["comparison"]:
        assert not row["timed"] or _is_spread(row["after_over_before"], row["after_over_before"]["repeats"])
