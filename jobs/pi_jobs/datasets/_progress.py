"""A progress line for copies and staging: done/total, rate and ETA, on stderr (a terminal gets
one line redrawn in place, a log gets a line every `every_s` seconds)."""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO


def human_bytes(n: float) -> str:
    """`n` bytes in binary units.

    Example:
        >>> human_bytes(3 * 2**20)
        '3.0 MiB'
    """
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


class Progress:
    """Counts units (bytes or samples) toward a total and reports rate and ETA.

    Example:
        >>> bar = Progress("copy pick-v3", total=10 * 2**20, unit="bytes")
        >>> bar.advance(2**20)
        >>> bar.close()
    """

    def __init__(
        self, label: str, *, total: int, unit: str = "bytes", out: TextIO | None = None, every_s: float = 1.0
    ) -> None:
        self.label = label
        self.total = max(int(total), 0)
        self.unit = unit
        self.done = 0
        self.out = sys.stderr if out is None else out
        self.every_s = every_s
        self._start = time.monotonic()
        self._last = 0.0
        self._lock = threading.Lock()
        self._tty = bool(getattr(self.out, "isatty", lambda: False)())

    def _amount(self, n: float) -> str:
        return human_bytes(n) if self.unit == "bytes" else f"{n:,.0f} {self.unit}"

    def line(self) -> str:
        elapsed = max(time.monotonic() - self._start, 1e-9)
        rate = self.done / elapsed
        left = self.total - self.done
        eta = f"{left / rate:.0f} s" if rate > 0 and left > 0 else ("0 s" if left <= 0 else "?")
        share = 100.0 * self.done / self.total if self.total else 100.0
        width = 24
        filled = int(width * min(share, 100.0) / 100)
        return (
            f"{self.label} [{'#' * filled}{'.' * (width - filled)}] {share:5.1f}% "
            f"{self._amount(self.done)}/{self._amount(self.total)} {self._amount(rate)}/s ETA {eta}"
        )

    def advance(self, n: int) -> None:
        with self._lock:
            self.done += int(n)
            now = time.monotonic()
            if now - self._last < self.every_s:
                return
            self._last = now
            self._emit()

    def _emit(self) -> None:
        end = "\r" if self._tty else "\n"
        self.out.write(self.line() + end)
        self.out.flush()

    def close(self) -> None:
        with self._lock:
            self.out.write(self.line() + "\n")
            self.out.flush()
