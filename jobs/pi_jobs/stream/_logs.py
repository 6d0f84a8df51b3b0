"""Reading Flink's and the Python workers' logs: the reason a job failed, not 40 frames of Beam."""

from __future__ import annotations

from pathlib import Path


def python_error(text: str, *, frames: int = 14) -> str | None:
    """The last Python traceback in `text`, cut to its innermost frames and the exception line.

    Beam's worker tracebacks run 40+ frames deep before reaching our code, and Java stack lines
    follow them; the reason is at the end of the Python part.
    """
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if "Traceback (most recent call last)" in line]
    if not starts:
        return None
    block: list[str] = []
    seen_exception_line = False
    for line in lines[starts[-1] + 1 :]:
        if line.startswith("\tat ") or (seen_exception_line and not line.strip()):
            break
        if line and not line[0].isspace():
            seen_exception_line = True
        block.append(line)
    head = lines[starts[-1]].strip()
    return "\n".join([head, "  ...", *block[-frames:]])


def log_tail(log_dir: Path, *, lines: int = 40, max_chars: int = 6000) -> str:
    """The Python error (else the last lines) of the newest Flink/Python worker logs."""
    files = sorted(log_dir.glob("*.log"), key=lambda p: p.stat().st_mtime, reverse=True)
    parts = []
    for f in files[:2]:
        text = f.read_text(errors="replace")
        picked = python_error(text) or "\n".join(text.splitlines()[-lines:])
        parts.append(f"--- {f} ---\n{picked}")
    out = "\n".join(parts) or f"(no *.log files in {log_dir})"
    return out[-max_chars:]
