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
    # compacted as production would: `pilake compact` after every 2 group commits
    command += ["--compact-every", "2"]
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


def test_the_growth_compacts_as_production_does(run: tuple[dict[str, Any], Path, str]) -> None:
    results, _, _ = run
    compaction = results["sizes"][0]["compaction"]
    assert compaction["every_groups"] == 2 and compaction["runs"] == 1 and compaction["s_total"] > 0
    # the two group commits' files merged into one per table (then the measured commits added theirs)
    assert compaction["episodes_files_after_last"] == 1
    assert results["config"]["grow"]["compact_every"] == 2


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


def _episode_ids(home: Path) -> list[str]:
    from deltalake import DeltaTable

    table = DeltaTable(str(home / "lake" / "episodes"))
    return sorted(table.to_pyarrow_table(columns=["episode_id"]).column("episode_id").to_pylist())


def _catalog_ids(home: Path) -> list[str]:
    from pi_catalog import Catalog

    catalog = Catalog(str(home / "catalog"))
    try:
        return sorted(catalog.episode_ids("SELECT DISTINCT episode_id FROM episodes"))
    finally:
        catalog.close()


def _resume(tmp: Path) -> list[str]:
    home, out = tmp / "run" / "home", tmp / "out"
    command = [sys.executable, "-m", "benchmarks.scale.million", "--resume"]
    return [*command, "--home", str(home), "--out", str(out)]


def _wait_for_commits(home: Path, commits: int, proc: subprocess.Popen[str]) -> None:
    """Until the episodes table has `commits` more Delta commits (or the run ended)."""
    log = home / "lake" / "episodes" / "_delta_log"
    before = len(list(log.glob("*.json")))
    deadline = time.monotonic() + 300
    while len(list(log.glob("*.json"))) < before + commits and proc.poll() is None:
        assert time.monotonic() < deadline, "the resumed growth committed nothing in 300 s"
        time.sleep(0.2)


def test_a_killed_growth_resumes_with_exactly_its_episodes(run: tuple[dict[str, Any], Path, str]) -> None:
    """The lake the run grew (20 episodes, groups of 10) grown on with --resume: stopped by low
    disk, by SIGKILL mid-growth (the catalog missing rows too), by SIGTERM; each resume starts
    from exactly the episodes the lake holds: scale-0000000.. each once, the catalog the same,
    and the progress file's legs add up to its total growth time."""
    _, tmp, _ = run
    home, out = tmp / "run" / "home", tmp / "out"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}

    def exact() -> int:
        ids = _episode_ids(home)
        assert ids == [f"scale-{i:07d}" for i in range(len(ids))], ids[-5:]
        assert _catalog_ids(home) == ids
        return len(ids)

    held = exact()
    # 1. free disk under the limit: one group, then a clean stop that says why
    low = subprocess.run(
        [*_resume(tmp), "--sizes", "100000", "--min-free-gb", "1000000"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert low.returncode == 0, low.stdout[-3000:] + low.stderr[-3000:]
    assert exact() == held + 10
    progress = json.loads((out / "million-progress.json").read_text())
    assert "GB of disk free" in progress["legs"][-1]["stopped"]
    # 2. SIGKILL mid-growth, with the catalog missing the last group as a kill between the two
    #    commits leaves it: the resume records those rows again and grows on
    grow = subprocess.Popen([*_resume(tmp), "--sizes", "100000"], cwd=ROOT, env=env, text=True)
    # 5 episodes commits: at least 4 group commits (a compaction after every 2 commits one too)
    _wait_for_commits(home, 5, grow)
    grow.kill()
    grow.wait(timeout=60)
    killed_at = len(_episode_ids(home))
    assert killed_at >= held + 30
    from pi_catalog import Catalog

    catalog = Catalog(str(home / "catalog"))
    catalog.forget_episodes([f"scale-{i:07d}" for i in range(killed_at - 10, killed_at)])
    catalog.close()
    again = subprocess.run(
        [*_resume(tmp), "--sizes", str(killed_at + 20)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert f"resuming at {killed_at:,} episodes (exact; 10 catalog rows recorded again)" in again.stdout
    assert exact() == killed_at + 20
    # 3. SIGTERM: stops between group commits, exit 0, says so
    term = subprocess.Popen(
        [*_resume(tmp), "--sizes", "100000"], cwd=ROOT, env=env, text=True, stdout=subprocess.PIPE
    )
    _wait_for_commits(home, 2, term)
    term.terminate()
    stdout, _ = term.communicate(timeout=120)
    assert term.returncode == 0, stdout[-3000:]
    exact()
    progress = json.loads((out / "million-progress.json").read_text())
    assert "SIGTERM received" in progress["legs"][-1]["stopped"]
    assert progress["episodes"] == len(_episode_ids(home))
    legs = progress["legs"]
    assert len(legs) >= 4 and progress["grow_s_total"] == round(sum(leg["grow_s"] for leg in legs), 1)
