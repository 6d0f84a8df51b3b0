"""The million-episode run (`python -m benchmarks.scale.million`) at a toy size, run as a user runs
it: grows a lake through the real group-commit path, stops growing when `--grow-until` has
passed (as the hour-long run does when it cannot reach a million in time), writes its progress
file, times `pilake verify`, `gc`, `dataset create` and `dataset copy` on the grown lake, and
writes a scale.json the docs renderer reads (the earlier baseline's keys kept, a `million`
object added). No timing asserts: the figures are whatever this machine gives.

Tests never import `benchmarks` (pyproject's import contracts): they run its command.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path, str]:
    tmp = tmp_path_factory.mktemp("million")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "benchmarks.scale.million", "--home", str(tmp / "run" / "home")]
    command += ["--out", str(tmp / "out"), "--sizes", "20,40,60", "--probe-sizes", "", "--group-size", "10"]
    # already passed: the growth stops at its first size and the lake of 20 is measured
    command += ["--grow-until", str(time.time() - 1), "--copy-episodes", "10", "--probe-batches", "2"]
    # a lock of its own: the machine's heavy lock may be held by a long run
    command += ["--lock", str(tmp / "heavy.lock")]
    proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return json.loads((tmp / "out" / "scale.json").read_text()), tmp, proc.stdout


def test_growth_stops_at_the_deadline_and_says_so(run: tuple[dict[str, Any], Path, str]) -> None:
    results, tmp, stdout = run
    assert [s["episodes"] for s in results["sizes"]] == [20]
    million = results["million"]
    assert million["episodes_reached"] == 20
    assert "--grow-until passed" in million["stopped"]
    progress = json.loads((tmp / "out" / "million-progress.json").read_text())
    assert [s["episodes"] for s in progress["sizes"]] == [20] and progress["stopped"]
    assert "growth stopped at 20 episodes" in stdout


def test_the_operator_commands_run_on_the_grown_lake(run: tuple[dict[str, Any], Path, str]) -> None:
    results, tmp, _ = run
    ops = results["million"]["operations"]
    for name in ("verify", "gc", "dataset_create", "dataset_copy"):
        assert ops[name]["returncode"] == 0, (name, ops[name])
        assert ops[name]["s"] is not None and ops[name]["s"] > 0
    assert ops["dataset_copy"]["episodes"] == 10
    assert (tmp / "run" / "copy-dest" / "lake" / "episodes" / "_delta_log").is_dir()
    top = results["sizes"][-1]
    assert top["probe"]["open_s"] > 0 and top["probe"]["cold_host"]["open_s"] > 0
    assert results["million"]["open_cold_s"] == top["probe"]["cold_host"]["open_s"]


def test_the_json_keeps_what_the_docs_render(run: tuple[dict[str, Any], Path, str], tmp_path: Path) -> None:
    results, _, _ = run
    for key in ("throughput", "ingest", "targets", "targets_detail", "machine", "config", "elapsed"):
        assert key in results, key
    assert set(results["targets"]) == set(results["targets_detail"])
    assert "read_vs_encoded_chunks" in results["sizes"][0]["bytes_per_sample"]
    # the renderer's scale block, on this JSON (benchmarks/_doc_tables.py, run as its command)
    (tmp_path / "scale.json").write_text(json.dumps(results))
    code = (
        "import sys; from pathlib import Path; from benchmarks._doc_tables import scale; "
        "print(scale(Path(sys.argv[1])))"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "The grown lake (20 episodes" in proc.stdout and "`pilake verify`" in proc.stdout
