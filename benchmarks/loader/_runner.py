"""Running one leg: its own process, its result line, and the peak memory of its process tree.

The parent samples the proportional set size (PSS, RSS where PSS is unreadable) of the leg's
process and all its descendants (workers included) while it runs; the leg prints its figures as
one line prefixed with `_timing.RESULT_PREFIX`.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.loader._timing import RESULT_PREFIX

# legs run from the repository root (`python -m benchmarks.loader._legs ...`)
ROOT = Path(__file__).resolve().parents[2]


class PeakMemory:
    """Samples the summed PSS (RSS where PSS is unreadable) of a process and its descendants."""

    def __init__(self, pid: int, interval_s: float = 0.1) -> None:
        import psutil  # type: ignore[import-untyped]

        self._root = psutil.Process(pid)
        self._interval_s = interval_s
        self.peak_bytes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _sample(self) -> int:
        import psutil

        total = 0
        try:
            procs = [self._root, *self._root.children(recursive=True)]
        except psutil.Error:
            return 0
        for p in procs:
            try:
                try:
                    total += int(p.memory_full_info().pss)
                except (psutil.AccessDenied, AttributeError):
                    total += int(p.memory_info().rss)
            except psutil.Error:
                pass
        return total

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak_bytes = max(self.peak_bytes, self._sample())
            self._stop.wait(self._interval_s)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak_bytes


def run_leg(command: list[str], *, timeout_s: float, env: dict[str, str]) -> dict[str, Any]:
    """Run one leg's process; returns its result with peak_memory_mb, or an error entry."""
    spawned = time.monotonic()
    proc = subprocess.Popen(
        [*command, "--spawned-at", repr(spawned)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=ROOT,
    )
    memory = PeakMemory(proc.pid)
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        out += f"\n(killed after {timeout_s:.0f} s)"
    peak = memory.stop()
    for line in out.splitlines():
        if line.startswith(RESULT_PREFIX):
            result: dict[str, Any] = json.loads(line[len(RESULT_PREFIX) :])
            result["peak_memory_mb"] = round(peak / 2**20, 1)
            return result
    return {"error": f"exit {proc.returncode}: " + "\n".join(out.splitlines()[-15:])}
