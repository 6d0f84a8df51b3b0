"""The layers of the tree (README "Layout"): dependencies point down the data flow.

The contracts live in pyproject.toml ([tool.importlinter]); this runs them, and checks that they
can fail: a module that breaks a layer is reported.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _lint_imports(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or "lint-imports"
    return subprocess.run([exe, *args], cwd=cwd, capture_output=True, text=True, timeout=300)


def test_every_import_contract_is_kept() -> None:
    result = _lint_imports()
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "0 broken" in result.stdout


def test_the_contracts_catch_an_upward_import(tmp_path: Path) -> None:
    """A copy of pyproject's contracts over a tiny tree in which pi_format imports pi_loader
    must fail: proves the layers contract is not vacuous."""
    for package, body in {
        "pi_format": "from pi_loader import thing\n",
        "pi_catalog": "",
        "pi_loader": "thing = 1\n",
        "pi_ingest": "",
    }.items():
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text(body)
    (tmp_path / ".importlinter").write_text(
        textwrap.dedent(
            """
            [importlinter]
            root_packages =
                pi_format
                pi_ingest
                pi_catalog
                pi_loader

            [importlinter:contract:layers]
            name = layers
            type = layers
            layers =
                pi_loader | pi_ingest
                pi_catalog
                pi_format
            """
        )
    )
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or "lint-imports"
    result = subprocess.run(
        [exe, "--config", str(tmp_path / ".importlinter")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(tmp_path), "PATH": str(Path(sys.executable).parent)},
    )
    assert result.returncode != 0
    assert "pi_format is not allowed to import pi_loader" in result.stdout
