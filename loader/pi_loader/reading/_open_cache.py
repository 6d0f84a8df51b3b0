"""This host's copies of what opening a pinned snapshot read: its episodes rows, by table versions.

Opening a `Dataset` at a snapshot (a pin, a saved `Snapshot`) reads the current Delta logs of
the lake's tables (1.0-1.5 MB) and the episodes rows of its (episode, attempt) pairs. Both
depend on nothing but the snapshot and the tables' latest versions, and a Delta version never
changes once committed, so the result is kept here under the key (snapshot fingerprint, latest
version of each table) and is valid forever. The next open lists the tables' `_delta_log/`
(names only: no log bytes), finds the same versions and reads the rows from here. With the
store down, the newest copy of the snapshot's open is used as it is (`newest`), so training
resumes from a warm cache while the store is away.

Files: `<host index dir>/opens/<fingerprint>-<episodes>-<steps>-<video>.arrow` (Arrow IPC of the
rows) and a `.json` beside it (the tables that record page CRCs, and what the rows file must be:
its format, fingerprint, table versions, size and CRC-32); both written to a temporary name and
renamed (the rows first), so a reader never sees half an entry. Arrow IPC checks no bytes of
its body, so an entry is trusted only when every recorded field matches, the CRC over the whole
mapped file included (zlib-ng, `pi_format.checksum`: ~0.01 s for 160 MB, 210,000 episodes): a file cut
short, grown, with a flipped byte anywhere, written by another version of this code or renamed
from another snapshot or table versions is a miss (and is removed), and the open reads the
lake again.

Example:
    >>> cache = OpenCache(Path(index_dir) / "opens")
    >>> cache.save("3f2a9c...", {"episodes": 7, "steps": 7, "video": 7}, rows, {"steps"})
    >>> cache.load("3f2a9c...", {"episodes": 7, "steps": 7, "video": 7}).rows.num_rows
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
from pi_format.checksum import crc32

from pi_loader.reading._cache_writes import settle, write_soon

__all__ = ["OpenCache", "OpenEntry", "open_cache_counts"]

_TABLES = ("episodes", "steps", "video")
# The entry format: an entry of another (an older one had no size and CRC) is a miss.
_FORMAT = "pi_loader.open_cache/2"
_NAME = re.compile(r"^([0-9a-f]{1,64})-(\d+)-(\d+)-(\d+)\.arrow$")
_lock = threading.Lock()
_counts = {"open_cache_hits": 0, "open_cache_offline_hits": 0}


def open_cache_counts() -> dict[str, int]:
    """This process's opens served from the cache: "open_cache_hits" (store up, same versions)
    and "open_cache_offline_hits" (store unreachable, the newest copy used)."""
    with _lock:
        return dict(_counts)


def count(name: str) -> None:
    with _lock:
        _counts[name] += 1


@dataclass(frozen=True, slots=True)
class OpenEntry:
    """A cached open: the table versions it was read at, its rows, the checksummed tables."""

    versions: dict[str, int]
    rows: pa.Table
    checksummed: frozenset[str]


class OpenCache:
    """The `opens/` directory of one lake on this host (see the module docstring)."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)

    def _stem(self, fingerprint: str, versions: Mapping[str, int]) -> str:
        if not re.fullmatch(r"[0-9a-f]{1,64}", fingerprint):
            raise ValueError(f"a snapshot fingerprint is hex, got {fingerprint!r}")
        return f"{fingerprint}-" + "-".join(str(int(versions[t])) for t in _TABLES)

    def load(self, fingerprint: str, versions: Mapping[str, int]) -> OpenEntry | None:
        """The entry for `fingerprint` at exactly `versions`, or None."""
        settle(self.directory)
        return self._read(self.directory / f"{self._stem(fingerprint, versions)}.arrow")

    def newest(self, fingerprint: str) -> OpenEntry | None:
        """The entry for `fingerprint` at the highest versions this host has, or None."""
        settle(self.directory)
        try:
            names = os.listdir(self.directory)
        except OSError:  # none yet, or not a directory one can list: no entry
            return None
        found: list[tuple[tuple[int, ...], str]] = []
        for name in names:
            m = _NAME.match(name)
            if m and m.group(1) == fingerprint:
                found.append((tuple(int(m.group(i)) for i in (2, 3, 4)), name))
        for _, name in sorted(found, reverse=True):
            entry = self._read(self.directory / name)
            if entry is not None:
                return entry
        return None

    def save(
        self, fingerprint: str, versions: Mapping[str, int], rows: pa.Table, checksummed: Sequence[str]
    ) -> None:
        """Keep `rows` for `fingerprint` at `versions` (best effort: a full disk only logs).
        Rows of BACKGROUND_BYTES or more are written in a thread (`_cache_writes`): this returns
        at once and a `load` in this process waits for the write."""
        stem = self._stem(fingerprint, versions)
        write_soon(
            self.directory,
            rows.get_total_buffer_size(),
            lambda: self._save(stem, fingerprint, versions, rows, checksummed),
        )

    def _save(
        self,
        stem: str,
        fingerprint: str,
        versions: Mapping[str, int],
        rows: pa.Table,
        checksummed: Sequence[str],
    ) -> None:
        try:
            self.directory.mkdir(parents=True, exist_ok=True)

            def write_rows(out: Any) -> None:
                # streamed into the file: no in-memory copy of the rows (160 MB at 210,000 episodes)
                with pa.ipc.new_file(out, rows.schema) as writer:
                    writer.write_table(rows)

            # the rows first, then the record of them: a reader between the two finds no (or the
            # previous, equal) record and misses
            self._atomic(f"{stem}.arrow", write_rows)
            size, crc = _size_and_crc(self.directory / f"{stem}.arrow")
            meta = {
                "format": _FORMAT,
                "fingerprint": fingerprint,
                "versions": {t: int(versions[t]) for t in _TABLES},
                "checksummed": sorted(checksummed),
                "bytes": size,
                "crc32": crc,
            }
            self._atomic(f"{stem}.json", lambda out: out.write(json.dumps(meta).encode()))
        except OSError:
            pass  # a cache: the open already has its rows

    def _atomic(self, name: str, write: Callable[[Any], object]) -> None:
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as out:
                write(out)
                out.flush()
                os.fsync(out.fileno())
            os.rename(tmp, self.directory / name)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise

    def _read(self, path: Path) -> OpenEntry | None:
        meta_path = path.with_suffix(".json")
        named = _NAME.match(path.name)
        try:
            meta = json.loads(meta_path.read_text())
            versions = {t: int(meta["versions"][t]) for t in _TABLES}
            checksummed = frozenset(str(t) for t in meta["checksummed"])
            if (
                named is None
                or meta.get("format") != _FORMAT
                or meta.get("fingerprint") != named.group(1)
                or tuple(versions[t] for t in _TABLES) != tuple(int(named.group(i)) for i in (2, 3, 4))
            ):
                raise ValueError(f"{path.name}: its record names another entry or format")
            # mapped, not read: the rows stay in the page cache, shared by every process of the host
            mapped = pa.memory_map(str(path))
            whole = mapped.read_buffer()
            if whole.size != int(meta["bytes"]) or crc32(memoryview(whole)) != int(meta["crc32"]):
                raise ValueError(f"{path.name}: its size or CRC-32 is not the recorded one")
            rows = pa.ipc.open_file(whole).read_all()
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError, pa.ArrowException):
            for broken in (path, meta_path):  # damaged: a miss, read again from the store
                with contextlib.suppress(OSError):
                    broken.unlink()
            return None
        return OpenEntry(versions, rows, checksummed)


def _size_and_crc(path: Path) -> tuple[int, int]:
    """The size and CRC-32 of the file at `path` (mapped: no copy)."""
    whole = pa.memory_map(str(path)).read_buffer()
    return int(whole.size), crc32(memoryview(whole))
