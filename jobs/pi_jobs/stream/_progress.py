"""The stream job's progress files, both sides: each sink subtask writes its own counts
(`subtask_progress_file`, `load_progress`, `write_progress`) and the driver adds them up
(`read_progress`). One JSON document per subtask, replaced atomically, so a reader never sees
half a file and a restarted subtask keeps counting from where it was.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

# counts a subtask keeps; the driver sums them over subtasks
SUMMED = (
    "messages",
    "bytes",
    "committed",
    "duplicates",
    "quarantined",
    "incomplete",
    "buffered",
    "timed_out",
    "recovered",  # episodes read back from Kafka after a restore (pi_jobs.stream._held)
)


def subtask_progress_file(progress_path: str | Path, subtask: int) -> Path:
    """The progress file of sink subtask `subtask` next to the configured `progress_path`.

    Example:
        >>> subtask_progress_file("/run/progress.json", 1)
        PosixPath('/run/progress-1.json')
    """
    path = Path(progress_path)
    return path.with_name(f"{path.stem}-{subtask}{path.suffix}")


def load_progress(path: Path) -> dict[str, Any]:
    """A subtask's counts from its file (after a Flink restart inside the same run), or zeros."""
    try:
        doc: dict[str, Any] = json.loads(path.read_text())
        if isinstance(doc.get("offsets"), dict):
            return doc
    except (OSError, ValueError):
        pass
    return {
        "offsets": {},
        **{name: 0 for name in SUMMED if name != "buffered"},
        "first_activity_ns": 0,
        "last_activity_ns": 0,
    }


def write_progress(path: Path, progress: dict[str, Any], *, incomplete: int, buffered: int) -> None:
    """Stamp `progress` with the episodes in memory and the activity time, and replace `path`."""
    now = time.time_ns()
    progress["incomplete"] = incomplete
    progress["buffered"] = buffered
    progress["first_activity_ns"] = progress.get("first_activity_ns") or now
    progress["last_activity_ns"] = now
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(progress, sort_keys=True))
    os.replace(tmp, path)  # atomic: the driver never reads half a file


def progress_files(path: Path) -> list[Path]:
    """Every subtask's progress file of the job whose `progress_path` is `path`."""
    return sorted(path.parent.glob(f"{path.stem}-*{path.suffix}"))


def read_progress(path: Path) -> dict[str, Any]:
    """The progress of all sink subtasks of the job whose `progress_path` is `path`, added up:
    counts summed, per-partition offsets the largest any subtask processed, activity from first
    to last.

    Example:
        >>> read_progress(Path("/run/progress.json"))["committed"]
        12
    """
    docs = []
    for one in progress_files(path):
        try:
            docs.append(json.loads(one.read_text()))
        except (OSError, ValueError):
            continue
    if not docs:
        return {}
    total: dict[str, Any] = {k: sum(int(d.get(k, 0)) for d in docs) for k in SUMMED}
    offsets: dict[str, int] = {}
    for d in docs:
        for p, o in d.get("offsets", {}).items():
            offsets[p] = max(offsets.get(p, -1), int(o))
    total["offsets"] = offsets
    starts = [int(d["first_activity_ns"]) for d in docs if d.get("first_activity_ns")]
    total["first_activity_ns"] = min(starts) if starts else 0
    total["last_activity_ns"] = max(int(d.get("last_activity_ns", 0)) for d in docs)
    total["subtasks"] = len(docs)
    # the most any one subtask held in memory at once (pi_jobs.stream.limits bounds it)
    total["peak_held_bytes"] = max(int(d.get("peak_held_bytes", 0)) for d in docs)
    acted: dict[str, int] = {}  # how often each limit acted (pi_jobs.stream.limits)
    for d in docs:
        for name, n in d.get("limits_acted", {}).items():
            acted[name] = acted.get(name, 0) + int(n)
    total["limits_acted"] = acted
    return total
