"""The README is a front door and the docs site builds clean (issue 36 item 1).

`scripts/test.sh` builds the site with `mkdocs build --strict` (a warning is an error); these
tests keep the README short with links that resolve, every docs page in the nav, and show that
the strict build really fails on a broken link, a missing anchor and a page left out of the nav.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
README_MAX_LINES = 250  # one screen or two: the manual lives in docs/ (issue 36)
_LINK = re.compile(r"\]\(([^)\s]+)\)")


def _nav_pages(nav: object) -> list[str]:
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, list):
        return [page for item in nav for page in _nav_pages(item)]
    if isinstance(nav, dict):
        return [page for value in nav.values() for page in _nav_pages(value)]
    return []


def _config() -> dict[str, object]:
    loaded = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    assert isinstance(loaded, dict)
    return loaded


def test_the_readme_is_a_front_door_with_the_two_commands_ci_runs() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines (at most {README_MAX_LINES}): move the manual's text into a "
        "docs/ page and link it"
    )
    text = "\n".join(lines)
    ci = (ROOT / ".ci" / "run").read_text()
    ci_commands = re.findall(r"\./scripts/\w+\.sh", ci)
    assert ci_commands == ["./scripts/setup.sh", "./scripts/test.sh"]
    for command in ci_commands:
        assert f"{command} " in text, f"README.md does not give `{command}`, which .ci/run runs"


def test_every_relative_link_of_the_readme_resolves() -> None:
    text = (ROOT / "README.md").read_text()
    targets = [t for t in _LINK.findall(text) if not re.match(r"^[a-z]+:", t) and not t.startswith("#")]
    assert targets, "README.md links nowhere"
    missing = [t for t in targets if not (ROOT / t.split("#", 1)[0]).exists()]
    assert not missing, f"README.md links to files that do not exist: {missing}"


def test_every_docs_page_is_in_the_nav() -> None:
    nav = _nav_pages(_config()["nav"])
    pages = sorted(p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md"))
    omitted = [p for p in pages if p not in nav]
    assert not omitted, f"docs pages missing from mkdocs.yml's nav: {omitted}"


def _site_copy(tmp_path: Path) -> Path:
    """The docs site's sources in `tmp_path` (docs/ and the config copied, the code linked)."""
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    (tmp_path / "scripts").mkdir()
    for hook in ("docs_hooks.py", "docs_griffe.py"):
        shutil.copy(ROOT / "scripts" / hook, tmp_path / "scripts" / hook)
    for folder in ("format", "ingest", "catalog", "loader", "jobs", "benchmarks", "deploy"):
        (tmp_path / folder).symlink_to(ROOT / folder, target_is_directory=True)
    return tmp_path / "mkdocs.yml"


def _build(config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config)],
        cwd=config.parent,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_strict_build_fails_on_a_broken_link_a_missing_anchor_and_an_omitted_page(
    tmp_path: Path,
) -> None:
    config = _site_copy(tmp_path)
    docs = tmp_path / "docs"
    (docs / "orphan.md").write_text("# Orphan\n\nIn no nav.\n")
    loader = docs / "loader.md"
    loader.write_text(
        loader.read_text() + "\nSee [gone](no-such-page.md) and [a heading](layout.md#no-such-heading).\n"
    )
    built = _build(config)
    out = built.stdout + built.stderr
    assert built.returncode != 0, out[-3000:]
    assert "no-such-page.md" in out, out[-3000:]
    assert "no-such-heading" in out, out[-3000:]
    assert "orphan.md" in out, out[-3000:]
    assert "Aborted with 3 warnings in strict mode" in out, out[-3000:]  # those three, nothing else


def _shell_commands(block: str) -> list[list[str]]:
    """The commands of a bash block, a quoted argument spanning lines kept whole."""
    commands, pending = [], ""
    for line in block.splitlines():
        pending += line + "\n"
        try:
            words = shlex.split(pending, comments=True)
        except ValueError:  # a quote still open: the command goes on
            continue
        if words:
            commands.append(words)
        pending = ""
    assert not pending.strip(), f"unterminated command: {pending!r}"
    return commands


def _without_env(words: list[str]) -> list[str]:
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0], flags=re.S):
        words = words[1:]
    return words


def test_the_readme_tour_commands_parse_with_the_cli() -> None:
    """`pilake` CLI renames break the tour: every pilake command of the README's bash blocks must
    parse (argparse exits 2 on an unknown command or flag)."""
    from pi_jobs.cli import build_parser

    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)```", text, flags=re.S)
    # an environment assignment before the command (PILAKE_LAKE=... pilake ...) is not the command
    stripped = [_without_env(c) for block in blocks for c in _shell_commands(block)]
    commands = [c for c in stripped if c and c[0] == "pilake"]
    assert {c[1] for c in commands} >= {"sql", "dataset", "train", "ui"}, commands
    parser = build_parser()
    for command in commands:
        try:
            parser.parse_args(command[1:])
        except SystemExit as exit_:
            raise AssertionError(f"README.md's `{shlex.join(command)}` does not parse") from exit_
