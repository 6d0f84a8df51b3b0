"""The embedded Flink JVM starts with the product's JVM flags (pi_jobs.stream.job.EMBEDDED_JVM_ARGS:
C1 only, issue 35 item 2), and a JVM_ARGS of the user's own replaces them. Each case starts the
real PyFlink gateway JVM in a fresh process (a process starts its gateway once) and asks the JVM
for its own input arguments; no job runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

PROBE = """
import json, sys
from pathlib import Path
from pi_jobs.stream.job import prepare_python_workers
prepare_python_workers(Path(sys.argv[1]))
from pyflink.java_gateway import get_gateway
bean = get_gateway().jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
print(json.dumps([str(a) for a in bean.getInputArguments()]))
"""


def _jvm_arguments(tmp_path: Path, env: dict[str, str]) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(tmp_path / "logs")],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    arguments: list[str] = json.loads(done.stdout.strip().splitlines()[-1])
    return arguments


def test_the_embedded_jvm_runs_c1_only(tmp_path: Path) -> None:
    from pi_jobs.stream.job import EMBEDDED_JVM_ARGS

    env = {k: v for k, v in os.environ.items() if k != "JVM_ARGS"}
    arguments = _jvm_arguments(tmp_path, env)
    assert EMBEDDED_JVM_ARGS.split() == ["-XX:TieredStopAtLevel=1"]
    assert "-XX:TieredStopAtLevel=1" in arguments, arguments


@pytest.mark.parametrize("user_args", ["-XX:TieredStopAtLevel=4", "-Xmx700m"])
def test_a_users_jvm_args_replace_the_default(tmp_path: Path, user_args: str) -> None:
    arguments = _jvm_arguments(tmp_path, dict(os.environ, JVM_ARGS=user_args))
    assert user_args in arguments, arguments
    assert "-XX:TieredStopAtLevel=1" not in arguments, arguments
