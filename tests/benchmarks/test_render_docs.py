"""The figures of the READMEs and the docs pages are generated from the committed JSON
(`python -m benchmarks.render_docs`): the committed documents must be what it writes, and a changed
baseline or a hand-edited figure must make the check fail. Run as a command (tests never import
benchmarks); which documents it renders is its own list (`--list`)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LOADER_PAGE = "docs/loader.md"  # the page holding the norm_bound block


def _render(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "benchmarks.render_docs", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _copy_checkout(tmp_path: Path) -> list[str]:
    listed = _render("--list")
    assert listed.returncode == 0, listed.stderr
    docs = listed.stdout.split()
    for doc in docs:
        (tmp_path / doc).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / doc, tmp_path / doc)
    (tmp_path / "benchmarks" / "baselines").mkdir(parents=True, exist_ok=True)
    for path in (ROOT / "benchmarks" / "baselines").glob("*.json"):
        shutil.copy(path, tmp_path / "benchmarks" / "baselines" / path.name)
    return docs


def test_it_renders_the_readmes_and_every_docs_page() -> None:
    docs = _render("--list").stdout.split()
    pages = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").rglob("*.md"))
    assert docs[:3] == ["README.md", "benchmarks/README.md", "benchmarks/baselines/README.md"]
    assert docs[3:] == pages and LOADER_PAGE in pages


def test_the_committed_readmes_are_what_the_json_renders() -> None:
    done = _render("--check")
    assert done.returncode == 0, (
        "the READMEs' figures differ from benchmarks/baselines/*.json: run "
        f"`python -m benchmarks.render_docs` and commit\n{done.stdout[-4000:]}{done.stderr[-2000:]}"
    )


def test_a_changed_baseline_or_a_hand_edited_figure_fails_the_check(tmp_path: Path) -> None:
    _copy_checkout(tmp_path)
    assert _render("--check", "--root", str(tmp_path)).returncode == 0

    # a new baseline: its figure must reach the README
    baseline = tmp_path / "benchmarks" / "baselines" / "steps_window.json"
    doc = json.loads(baseline.read_text())
    doc["durations"][0]["cpu_groups_vs_one_per_episode"] = {
        "median": 7.77, "min": 7.5, "max": 8.25, "repeats": 3, "values": [7.5, 7.77, 8.25],
    }  # fmt: skip
    baseline.write_text(json.dumps(doc))
    stale = _render("--check", "--root", str(tmp_path))
    assert stale.returncode == 1 and "benchmarks/README.md" in stale.stderr, stale.stdout + stale.stderr
    assert "7.77 (7.50–8.25)" in stale.stdout  # the diff shows the new figure
    assert _render("--root", str(tmp_path)).returncode == 0
    assert "7.77 (7.50–8.25)" in (tmp_path / "benchmarks" / "README.md").read_text()
    assert _render("--check", "--root", str(tmp_path)).returncode == 0

    # a figure typed by hand inside a block of a docs page
    page = tmp_path / LOADER_PAGE
    text = page.read_text()
    assert "| bound | 1.73% | 1.07% |" in text
    page.write_text(text.replace("| bound | 1.73% | 1.07% |", "| bound | 1.73% | 0.44% |"))
    edited = _render("--check", "--root", str(tmp_path))
    assert edited.returncode == 1 and LOADER_PAGE in edited.stderr


def test_a_block_without_its_closing_marker_is_refused(tmp_path: Path) -> None:
    _copy_checkout(tmp_path)
    page = tmp_path / LOADER_PAGE
    page.write_text(page.read_text().replace("<!-- /figures:norm_bound -->", ""))
    done = _render("--check", "--root", str(tmp_path))
    assert done.returncode == 2 and "no closing marker: ['norm_bound']" in done.stderr, done.stderr
