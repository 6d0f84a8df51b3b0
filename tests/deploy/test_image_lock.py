"""deploy/requirements-jobs.lock: the job image installs exact, hashed versions (issue 32) that
satisfy pyproject.toml's ranges for the [jobs] extra (scripts/lock_job_image.py writes the lock)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "deploy" / "requirements-jobs.lock"


def _lock() -> dict[str, tuple[str, list[str]]]:
    text = LOCK.read_text().replace("\\\n", " ")
    pins: dict[str, tuple[str, list[str]]] = {}
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        match = re.fullmatch(r"([A-Za-z0-9._-]+)==(\S+)((?:\s+--hash=sha256:[0-9a-f]{64})+)\s*", line)
        assert match, f"not an exact, hashed pin: {line!r}"
        pins[canonicalize_name(match[1])] = (match[2], re.findall(r"[0-9a-f]{64}", match[3]))
    return pins


def test_every_dependency_is_pinned_exactly_with_a_hash_and_fits_the_ranges() -> None:
    pins = _lock()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = [Requirement(r) for r in project["dependencies"] + project["optional-dependencies"]["jobs"]]
    for req in wanted:
        name = canonicalize_name(req.name)
        assert name in pins, f"{req} is not in the lock"
        assert req.specifier.contains(pins[name][0], prereleases=True), (str(req), pins[name][0])


def test_the_dockerfile_installs_from_the_lock_with_hashes() -> None:
    text = (ROOT / "deploy" / "Dockerfile").read_text()
    assert "COPY deploy/requirements-jobs.lock" in text
    assert "--require-hashes -r requirements-jobs.lock" in text
    assert '--no-deps ".[jobs]"' in text  # the project itself, nothing resolved again
