"""Files a run writes: atomic replacement, and JSONL logs that a resumed run cuts back.

A checkpoint at step S is the truth after a SIGKILL: the logs may hold steps past S that the
killed process wrote before it died, and the resumed run recomputes exactly those steps. So a
resumed log first drops every record with "step" > S (atomically), and the log of a run that
was killed and resumed ends up line for line the log of a run that never stopped.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any


def fsync_dir(path: Path) -> None:
    """Make a rename in `path` durable (POSIX needs the directory itself synced)."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def atomic_write(path: Path, write: Callable[[IO[bytes]], object]) -> None:
    """Write `path` through a temporary file in the same directory, fsync, then rename over it:
    a reader (or a process resumed after a crash) sees the old file or the whole new one.

    Example:
        >>> atomic_write(Path("run/snapshot.json"), lambda f: f.write(b"{}"))
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    fsync_dir(path.parent)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Every complete record of a JSONL file (a torn last line, from a kill mid-write, is skipped).

    Example:
        >>> [r["loss"] for r in read_jsonl(Path("runs/train/steps.rank0.jsonl"))]
    """
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        with contextlib.suppress(json.JSONDecodeError):
            record = json.loads(line)
            if isinstance(record, dict):
                out.append(record)
    return out


class JsonlLog:
    """An append-only JSONL log, one flushed line per record.

    Args:
        path: the file.
        keep_through_step: None starts a new log; an int keeps the existing records whose
            "step" is <= it (a resumed run) and drops the rest.

    Example:
        >>> with JsonlLog(Path("run/steps.rank0.jsonl"), keep_through_step=40) as log:
        ...     log.write({"step": 41, "loss": 0.5})
    """

    def __init__(self, path: Path, *, keep_through_step: int | None) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        kept = (
            []
            if keep_through_step is None
            else [r for r in read_jsonl(path) if int(r.get("step", 0)) <= keep_through_step]
        )
        text = "".join(json.dumps(r) + "\n" for r in kept).encode()
        atomic_write(path, lambda f: f.write(text))
        self._file: IO[str] | None = open(path, "a")  # noqa: SIM115 (closed by close())

    def write(self, record: dict[str, Any]) -> None:
        if self._file is None:
            raise ValueError(f"the log {self.path} is closed")
        # One write call per line, flushed: a SIGKILL leaves whole lines and at most one torn one.
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> JsonlLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(read_jsonl(self.path))
