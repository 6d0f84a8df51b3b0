"""A temporary directory of its own for each embedded Flink JVM, removed when its process ends.

The embedded mini-cluster writes into `java.io.tmpdir` (Flink's `io.tmp.dirs` default): the
table planner's jar (`flink-table-planner_<uuid>.jar`, 43 MB, every run), the TaskManager's
working dirs (`tm_*`) and the Python workers' files. A JVM that does not shut down cleanly
leaves them in /tmp; runs of tests and benchmarks left ~4 GB there. Now each process that starts
a gateway JVM gives it `<work dir>/jvm-tmp/<pid>` (`jvm_tmp_dir`), removed when that process
exits (the gateway JVM exits with it: PyFlink's server quits when its parent's pipe closes), and
the directories of processes that no longer run are removed when the next one starts.
"""

from __future__ import annotations

import atexit
import os
import shutil
from pathlib import Path

# The argument this module added to JVM_ARGS: a child process inherits JVM_ARGS, and must give
# its own JVM its own directory rather than its parent's (removed when the parent exits).
ADDED_ARG_ENV = "PILAKE_JVM_TMP_ARG"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def jvm_tmp_dir(base: Path) -> Path | None:
    """A fresh `base/<this pid>`, removed at this process's exit, after removing the directories
    under `base` of processes that no longer run. None where the path has whitespace (JVM_ARGS
    is split on it) or cannot be created: the JVM then uses the system's temporary directory.

    Example:
        >>> jvm_tmp_dir(Path("/home/me/.pilake/stream/jvm-tmp"))
        PosixPath('/home/me/.pilake/stream/jvm-tmp/41234')
    """
    base = base.absolute()
    if any(ch.isspace() for ch in str(base)):
        return None
    try:
        base.mkdir(parents=True, exist_ok=True)
        for old in base.iterdir():  # left by a process that was killed
            if old.name.isdigit() and int(old.name) != os.getpid() and not _alive(int(old.name)):
                shutil.rmtree(old, ignore_errors=True)
        mine = base / str(os.getpid())
        mine.mkdir(exist_ok=True)
    except OSError:
        return None
    atexit.register(shutil.rmtree, mine, ignore_errors=True)
    return mine


def with_jvm_tmp_dir(jvm_args: str, base: Path) -> str:
    """`jvm_args` with `-Djava.io.tmpdir` set to this process's `jvm_tmp_dir(base)`, unless the
    arguments name a temporary directory of their own (one inherited from a parent process's
    `with_jvm_tmp_dir` is replaced)."""
    inherited = os.environ.get(ADDED_ARG_ENV)
    args = [a for a in jvm_args.split() if a != inherited]
    if any(a.startswith("-Djava.io.tmpdir=") for a in args):
        return " ".join(args)
    tmp = jvm_tmp_dir(base)
    if tmp is None:
        return " ".join(args)
    added = f"-Djava.io.tmpdir={tmp}"
    os.environ[ADDED_ARG_ENV] = added
    return " ".join([*args, added])
