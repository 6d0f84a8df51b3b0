"""Write deploy/requirements-jobs.lock, the job image's pinned and hashed Python dependencies.

No pip-compile or uv is installed here, so the lock is pip's own resolution of a clean install
of `.[jobs]` (`pip install --dry-run --ignore-installed --report`, nothing installed), for the
image's platform: CPython 3.11 on x86_64 Linux. One file per package (a wheel;
apache-flink-libraries exists only as an sdist), with its SHA-256 as the index served it.
deploy/Dockerfile installs it with `uv pip install --require-hashes`, then the project itself
with `--no-deps`.

    python scripts/lock_job_image.py            # rewrite the lock
"""

from __future__ import annotations

import json
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "deploy" / "requirements-jobs.lock"
HEADER = """\
# The job image's Python dependencies (deploy/Dockerfile installs them with
# `uv pip install --require-hashes`, then pi-lake with --no-deps): a clean install of `.[jobs]`
# resolved by pip for CPython 3.11 on x86_64 Linux, one file per package with its SHA-256.
# Made by scripts/lock_job_image.py; tests/deploy/test_image_lock.py checks it against
# pyproject.toml. Do not edit by hand.
"""


def main() -> None:
    if sys.version_info[:2] != (3, 11) or platform.machine() != "x86_64":
        raise SystemExit("run on CPython 3.11 / x86_64 (the image's platform)")
    with tempfile.TemporaryDirectory() as tmp:
        report_path = Path(tmp) / "report.json"
        cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet"]
        subprocess.run([*cmd, "--report", str(report_path), f"{ROOT}[jobs]"], check=True)
        report = json.loads(report_path.read_text())
    lines = []
    for item in sorted(report["install"], key=lambda i: i["metadata"]["name"].lower()):
        name, version = item["metadata"]["name"], item["metadata"]["version"]
        if name == "pi-lake":
            continue
        info = item["download_info"]
        digest = info.get("archive_info", {}).get("hashes", {}).get("sha256")
        if not digest or not info["url"].endswith((".whl", ".tar.gz")):
            raise SystemExit(f"{name} {version}: no archive with a sha256 ({info['url']})")
        lines.append(f"{name}=={version} \\\n    --hash=sha256:{digest}")
    LOCK.write_text(HEADER + "\n".join(lines) + "\n")
    print(f"{LOCK.relative_to(ROOT)}: {len(lines)} packages")


if __name__ == "__main__":
    main()
