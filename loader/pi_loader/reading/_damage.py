"""Damage stays local (architecture decision 10, SPEC.md §7.14): what the loader does with a
lake file or Delta log entry it cannot read.

* A data file read for a sample (steps, video) that does not parse — a damaged or truncated
  footer, a page header that does not parse, a file shorter than its index says — is a
  `CorruptDataError` naming the table, the file (and row group when known); the readers add
  the episode (`CorruptDataError.at_episode`), and `Loader(on_corrupt="skip")` skips it.
  `as_corrupt` is that translation, for every exception a Parquet read can raise.
* An episodes (marker) file that does not read at open costs the episodes it holds, not the
  whole lake: `Dataset` opens without them and names it in `Dataset.unreadable` (an
  `Unreadable`: the table, the file, what is wrong, the episode ids the Delta log's statistics
  give for it) and in a `DamagedLakeWarning`.
* A Delta log whose newest commits do not load (a commit that is not valid JSON, say) is read at
  its newest version that loads (`readable_version`), and the commits after it are named as
  unreadable; a steps or video commit costs nothing else (samples are reached through the
  markers' locators, not through those logs' file lists).

`pilake verify` finds each of these places and `pilake repair` rebuilds what they held from raw.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from pi_loader._errors import CorruptDataError

log = logging.getLogger("pi_loader")

# How many versions below the newest one an open tries before giving up on a log: each try
# replays the log from its checkpoint (milliseconds); a log with more broken commits than this
# at its head is not one a training run should guess its way through.
MAX_LOG_FALLBACK = 32


class DamagedLakeWarning(UserWarning):
    """A `Dataset` opened without some lake files or log entries it could not read (see
    `Dataset.unreadable`); the episodes they hold are not in it. Run `pilake verify`.

    Example:
        >>> with warnings.catch_warnings(record=True) as seen:
        ...     ds = Dataset("/data/lake")
        >>> [str(w.message) for w in seen if w.category is DamagedLakeWarning]
    """


@dataclass(frozen=True, slots=True)
class Unreadable:
    """One lake file or log entry a `Dataset` could not read at open, and what it costs.

    Example:
        >>> ds.unreadable[0].table, ds.unreadable[0].file
        ('episodes', '/data/lake/episodes/part-sink-0-3f6c.parquet')
    """

    table: str
    file: str
    detail: str
    episodes: str  # which episodes it holds, as far as the lake can tell

    def __str__(self) -> str:
        return f"{self.table} {self.file}: {self.detail} ({self.episodes})"

    def as_dict(self) -> dict[str, str]:
        return {"table": self.table, "file": self.file, "detail": self.detail, "episodes": self.episodes}


def is_damage(err: BaseException) -> bool:
    """Whether `err`, raised reading a lake data file that exists, says its bytes are damaged
    (pyarrow's OSError for thrift, magic bytes, short reads, CRCs; ArrowInvalid; decompression)
    rather than that it is gone or the storage failed (those keep their own errors)."""
    from pi_loader.reading._cache import StorageError

    if isinstance(err, FileNotFoundError | PermissionError | StorageError | CorruptDataError):
        return False
    return isinstance(err, OSError | pa.ArrowException | EOFError)


def as_corrupt(err: BaseException, where: Mapping[str, object]) -> CorruptDataError:
    """`err` (a read of a damaged file, `is_damage`) as a CorruptDataError naming `where`; a
    page CRC mismatch from pyarrow names its page ("... page_ordinal N")."""
    text = " ".join(str(err).split())[:500]
    named = dict(where)
    if "CRC checksum verification failed" in text:
        page = text.rsplit("page_ordinal", 1)[-1].strip()
        named["page"] = int(page) if page.isdigit() else None
        return CorruptDataError(text, named)
    return CorruptDataError(f"the file does not read as Parquet ({type(err).__name__}: {text})", named)


def log_versions(table_uri: str, storage_options: Mapping[str, str] | None) -> list[int]:
    """The commit versions present in a table's `_delta_log` (its JSON commits), sorted."""
    from pi_format.lake import table_filesystem
    from pyarrow import fs as pafs

    try:
        fs, base = table_filesystem(table_uri)
        infos = fs.get_file_info(pafs.FileSelector(f"{base}/_delta_log", allow_not_found=True))
    except OSError:
        return []
    versions = []
    for info in infos:
        name = info.base_name
        if name.endswith(".json") and name[:-5].isdigit():
            versions.append(int(name[:-5]))
    return sorted(versions)


def readable_version(
    name: str, table_uri: str, storage_options: Mapping[str, str] | None, err: Exception
) -> tuple[Any, Unreadable] | None:
    """The table at its newest version that loads, below a latest one that does not (`err`),
    and the Unreadable naming the commits after it; None when no version within
    MAX_LOG_FALLBACK loads (the caller raises)."""
    from deltalake import DeltaTable

    versions = log_versions(table_uri, storage_options)
    if not versions:
        return None
    newest = versions[-1]
    options = dict(storage_options) if storage_options else None
    for version in range(newest - 1, max(-1, newest - 1 - MAX_LOG_FALLBACK), -1):
        try:
            table = DeltaTable(table_uri, storage_options=options, version=version)
        except Exception:  # deltalake's errors: this version does not load either
            continue
        first = f"{version + 1:020d}.json"
        cost = (
            "the files those commits added are not in this open"
            if name == "episodes"
            else "samples still reach this table's files through the markers' locators"
        )
        cause = err.__cause__ or err
        first_line = (str(cause).strip().splitlines() or [""])[0][:300]
        detail = (
            f"commits {version + 1}..{newest} of its Delta log do not load ({first_line}); "
            f"read at version {version}"
        )
        return table, Unreadable(name, f"{table_uri}/_delta_log/{first}", detail, cost)
    return None


def warn_unreadable(unreadable: Sequence[Unreadable]) -> None:
    """Say (a DamagedLakeWarning and the log) what an open left out."""
    text = (
        f"the lake has {len(unreadable)} damaged file(s) or log entries this Dataset could not read; "
        f"what they hold is left out: {'; '.join(map(str, unreadable))}. Run `pilake verify`, "
        "then `pilake repair` to rebuild them from raw"
    )
    log.warning("pi_loader: %s", text)
    warnings.warn(text, DamagedLakeWarning, stacklevel=3)


def damaged_files(
    table: str, paths: list[str], columns: list[str], schema: pa.Schema | None
) -> list[tuple[str, CorruptDataError]]:
    """The files of `paths` that do not read (footer, pages, CRCs), each with the
    CorruptDataError naming it and the row group where one is found: the error path only."""
    import pyarrow.parquet as pq

    bad = []
    for path in paths:
        group = None
        try:
            parquet = pq.ParquetFile(path, page_checksum_verification=True)
            have = [c for c in columns if c in parquet.schema_arrow.names]
            for group in range(parquet.metadata.num_row_groups):
                parquet.read_row_group(group, columns=have)
        except Exception as err:
            if not is_damage(err):
                raise
            bad.append((path, as_corrupt(err, {"table": table, "file": path, "row_group": group})))
    return bad


def pages_damaged(table: str, paths: list[str]) -> list[tuple[str, CorruptDataError]]:
    """The files of `paths` (of a table that records page CRCs in every file) with a page that
    lacks its CRC or fails it, each with the CorruptDataError naming it. Headers and CRCs only
    (the caller's pyarrow read decoded the pages): the C-backed walk of `pi_format.lake.
    page_walk` first (~3 us a page), `check_parquet_file` for any file it does not pass."""
    from pi_format.lake.integrity import check_parquet_file
    from pi_format.lake.page_walk import pages_intact

    bad = []
    for path in paths:
        if pages_intact(path):  # the C-backed walk: every page has its CRC and it matches
            continue
        check = check_parquet_file(path, require_crc=True, decode=False)  # names the fault
        if check.faults:
            fault = check.faults[0]
            where: dict[str, object] = {"table": table, "file": path}
            if fault.row_group >= 0:
                where.update(row_group=fault.row_group, column=fault.column, page=fault.page)
            bad.append((path, CorruptDataError(fault.detail, where)))
    return bad
