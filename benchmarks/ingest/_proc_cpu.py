"""Per-process and per-thread CPU accounting of the stream job's process tree, from /proc.

`benchmarks.ingest.cpu` counts the stream job's whole process tree as "ingest CPU"; this module
splits that same total by role (the CLI driver, the Flink JVM, Flink's Python worker) and the
JVM's share by thread (the Kafka source, the task thread, GC, JIT, checkpoints, py4j, ...), so a
profile can say where the CPU above the transcoding goes without counting anything less.

Thread names come from /proc/PID/task/TID/comm (the JVM names each native thread after its Java
thread, cut to 15 characters); digits are folded so `GC Thread#1` and `GC Thread#0` add up.
A thread that exits between two snapshots loses its CPU from the thread split but not from the
process total; `threads_exited` carries that remainder.

    >>> before = snapshot(job_pid); ...; after = snapshot(job_pid)
    >>> split = difference(before, after)
    >>> split["roles"]["jvm"], split["jvm_threads"]["GC Thread#"]
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_DIGITS = re.compile(r"\d+")


def _stat_cpu_s(stat_path: Path) -> float:
    """utime + stime of one /proc stat file, in seconds (fields 14 and 15; the name in
    parentheses may itself hold spaces, so split after its closing parenthesis)."""
    text = stat_path.read_text()
    fields = text[text.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def _role(pid: int, root_pid: int) -> str:
    if pid == root_pid:
        return "cli"
    try:
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "other"
    if comm.startswith("java"):
        return "jvm"
    if comm.startswith("python"):
        return "python_worker" if ("pyflink" in cmdline or "beam" in cmdline) else "python_other"
    return comm or "other"


def _descendants(root_pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(text[text.rindex(")") + 2 :].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    out, stack = [], [root_pid]
    while stack:
        pid = stack.pop()
        out.append(pid)
        stack.extend(children.get(pid, []))
    return out


def snapshot(root_pid: int) -> dict[str, Any]:
    """CPU seconds so far of every process under `root_pid` (by pid, with its role) and of
    every thread of its JVM processes (by thread name with digits folded)."""
    processes: dict[int, tuple[str, float]] = {}
    threads: dict[str, float] = {}
    for pid in _descendants(root_pid):
        try:
            cpu = _stat_cpu_s(Path(f"/proc/{pid}/stat"))
        except (OSError, ValueError):
            continue
        role = _role(pid, root_pid)
        processes[pid] = (role, cpu)
        if role != "jvm":
            continue
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                name = _DIGITS.sub("#", (task / "comm").read_text().strip())
                name = name.replace("##", "#")
                threads[f"{pid}:{task.name}:{name}"] = _stat_cpu_s(task / "stat")
            except (OSError, ValueError):
                continue
    return {"processes": processes, "threads": threads}


def difference(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """CPU seconds spent between two snapshots: by role (cli, jvm, python_worker, ...), and the
    JVM's by thread name (threads started in between count from zero)."""
    roles: dict[str, float] = {}
    for pid, (role, cpu) in after["processes"].items():
        start = before["processes"].get(pid, (role, 0.0))[1]
        roles[role] = roles.get(role, 0.0) + cpu - start
    by_name: dict[str, float] = {}
    for key, cpu in after["threads"].items():
        name = key.split(":", 2)[2]
        by_name[name] = by_name.get(name, 0.0) + cpu - before["threads"].get(key, 0.0)
    by_name["threads_exited"] = roles.get("jvm", 0.0) - sum(by_name.values())
    ordered = dict(sorted(by_name.items(), key=lambda kv: -kv[1]))
    return {"roles": roles, "jvm_threads": ordered}
