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


TMP_PROBE = """
import json, os, sys
from pathlib import Path
from pi_jobs.stream.job import prepare_python_workers
prepare_python_workers(Path(sys.argv[1]))
from pyflink.datastream import StreamExecutionEnvironment
from pyflink.table import StreamTableEnvironment
StreamTableEnvironment.create(StreamExecutionEnvironment.get_execution_environment())  # the planner jar
from pyflink.java_gateway import get_gateway
tmp = str(get_gateway().jvm.java.lang.System.getProperty("java.io.tmpdir"))
print(json.dumps({"pid": os.getpid(), "tmpdir": tmp, "files": sorted(os.listdir(tmp))}))
"""


def test_the_embedded_jvm_writes_its_temporary_files_under_the_work_dir_and_they_go_at_exit(
    tmp_path: Path,
) -> None:
    """Flink extracts its 43 MB table planner jar (and the TaskManager's dirs) into
    java.io.tmpdir on every run; a JVM that did not shut down cleanly left them in /tmp."""
    base = tmp_path / "jvm-tmp"
    dead = base / "999999999"  # left by a process that was killed (no such pid runs)
    dead.mkdir(parents=True)
    (dead / "flink-table-planner_x.jar").write_bytes(b"x")
    env = {k: v for k, v in os.environ.items() if k not in ("JVM_ARGS", "PILAKE_JVM_TMP_ARG")}
    done = subprocess.run(
        [sys.executable, "-c", TMP_PROBE, str(tmp_path / "logs")],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert Path(seen["tmpdir"]) == base / str(seen["pid"]), seen
    assert any(f.startswith("flink-table-planner_") for f in seen["files"]), seen
    assert not (base / str(seen["pid"])).exists(), "its directory outlived the process"
    assert not dead.exists(), "a dead process's directory was not removed"


def test_an_inherited_tmpdir_is_replaced_and_a_users_own_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pi_jobs.stream._jvm_tmp import ADDED_ARG_ENV, with_jvm_tmp_dir

    parent = "-Djava.io.tmpdir=/somewhere/jvm-tmp/1"
    monkeypatch.setenv(ADDED_ARG_ENV, parent)
    args = with_jvm_tmp_dir(f"-Xmx1g {parent}", tmp_path / "jvm-tmp")
    assert args == f"-Xmx1g -Djava.io.tmpdir={tmp_path / 'jvm-tmp' / str(os.getpid())}"
    assert with_jvm_tmp_dir("-Djava.io.tmpdir=/mine", tmp_path / "x") == "-Djava.io.tmpdir=/mine"
    assert with_jvm_tmp_dir("-Xmx1g", tmp_path / "with space") == "-Xmx1g"
