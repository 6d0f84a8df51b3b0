"""One measured leg run in a fresh process, and the worst worker of a leg: shared by the read-side
probes (read_side, worker_memory), whose legs print one JSON line after a prefix."""

from __future__ import annotations

import json
import subprocess
from typing import Any


def prefixed_result(cmd: list[str], env: dict[str, str], prefix: str, what: str) -> dict[str, Any]:
    """Run `cmd` and return the JSON its stdout printed after `prefix`.

    Raises:
        RuntimeError: the leg printed no such line (its exit code and stderr's tail say why).

    Example:
        >>> prefixed_result([sys.executable, "-m", "benchmarks.scale.read_side", "--leg", "cold", ...],
        ...                 env, "READ_SIDE_RESULT ", "leg cold on big")["open_s"]
    """
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, check=False)
    for line in done.stdout.splitlines():
        if line.startswith(prefix):
            return dict(json.loads(line[len(prefix) :]))
    raise RuntimeError(f"{what} failed ({done.returncode}): {done.stderr[-2000:]}")


def worst_worker(leg: dict[str, Any], key: str) -> float:
    """The largest `key` over the leg's workers (the worker a host must have room for)."""
    return float(max(w[key] for w in leg["workers"]))
