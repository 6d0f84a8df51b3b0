"""The checks of one lake file (`pilake verify`): present with the size the Delta log records,
every Parquet page's CRC (`pi_format.lake.check_parquet_file`), every video chunk's
`chunk_crc32`, every raw message's wire CRC (`pi_format.wire.decode_chunk`), and which episodes
the damaged row groups hold. Read-only."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

# What a fault is, in the report's `kind`.
KIND_MISSING = "missing"  # the Delta log names a file that is not there
KIND_SIZE = "size"  # the file is there with another size than the log's
KIND_PAGE = "page_crc"  # a Parquet page whose bytes do not match its CRC (or do not parse)
KIND_CHUNK = "chunk_crc32"  # a video chunk whose bytes do not match its chunk_crc32
KIND_WIRE = "wire_crc"  # a raw message that decoded at ingest and no longer does
KIND_LOG = "delta_log"  # the table's log cannot be read
KIND_DECODE = "decode"  # a row group whose pages check but do not decode (pyarrow raises)
KIND_FOOTER = "footer"  # the file's footer does not parse (a truncated or overwritten file)
KIND_LOST = "lost_commit"  # a commit the catalog or the other tables know of is not in the log


@dataclass(slots=True)
class Fault:
    """One damaged place of the lake: the table, the file and where in it, and the episodes
    (episode_id, attempt_id) whose rows are there ([] when the id columns are damaged too)."""

    kind: str
    table: str
    file: str
    detail: str
    row_group: int | None = None
    column: str | None = None
    page: int | None = None
    row: int | None = None
    episodes: list[tuple[str, str]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "table": self.table,
            "file": self.file,
            "row_group": self.row_group,
            "column": self.column,
            "page": self.page,
            "row": self.row,
            "detail": self.detail,
            "episodes": [{"episode_id": e, "attempt_id": a} for e, a in self.episodes],
        }

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> Fault:
        return cls(
            kind=str(doc["kind"]),
            table=str(doc["table"]),
            file=str(doc["file"]),
            detail=str(doc["detail"]),
            row_group=doc.get("row_group"),
            column=doc.get("column"),
            page=doc.get("page"),
            row=doc.get("row"),
            episodes=[(str(e["episode_id"]), str(e["attempt_id"])) for e in doc.get("episodes", [])],
        )


@dataclass(slots=True)
class FileResult:
    """What the checks of one file found."""

    table: str
    file: str
    status: str  # ok | corrupt | unverifiable
    bytes: int = 0
    pages: int = 0
    pages_without_crc: int = 0
    chunks_without_crc: int = 0
    faults: list[Fault] = field(default_factory=list)
    # (episode_id, attempt_id) of the rows of a steps file's readable row groups: verify
    # cross-checks them against the markers (an episode whose marker vanished)
    attempts: list[tuple[str, str]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "file": self.file,
            "status": self.status,
            "bytes": self.bytes,
            "pages": self.pages,
            "pages_without_crc": self.pages_without_crc,
            "chunks_without_crc": self.chunks_without_crc,
            "faults": [f.as_dict() for f in self.faults],
            "attempts": [list(a) for a in self.attempts],
        }

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> FileResult:
        return cls(
            table=str(doc["table"]),
            file=str(doc["file"]),
            status=str(doc["status"]),
            bytes=int(doc.get("bytes", 0)),
            pages=int(doc.get("pages", 0)),
            pages_without_crc=int(doc.get("pages_without_crc", 0)),
            chunks_without_crc=int(doc.get("chunks_without_crc", 0)),
            faults=[Fault.from_dict(f) for f in doc.get("faults", [])],
            attempts=[(str(e), str(a)) for e, a in doc.get("attempts", [])],
        )


def check_file(
    fs: Any, base: str, table: str, path: str, logged_size: int | None, *, require_crc: bool = False
) -> FileResult:
    """Run every check of one file of lake table `table` (`path` as the Delta log names it);
    `require_crc`: the table records page CRCs in every file (a page without one is damage)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pi_format.lake import check_parquet_file
    from pyarrow import fs as pafs

    full = f"{base}/{path}"
    info = fs.get_file_info(full)
    if info.type == pafs.FileType.NotFound:
        detail = "the Delta log names this file but it is not there (deleted by hand? run `pilake audit`)"
        return FileResult(table, path, "corrupt", faults=[Fault(KIND_MISSING, table, path, detail)])
    result = FileResult(table, path, "ok", bytes=int(info.size))
    if logged_size is not None and int(info.size) != int(logged_size):
        detail = f"{info.size} bytes, the Delta log says {logged_size}"
        result.faults.append(Fault(KIND_SIZE, table, path, detail))
    # one read of the whole file (on S3 one GET, not one per column chunk: a video file holds
    # ~11 per chunk), then every check works on the buffer; one file in memory at a time
    with fs.open_input_file(full) as source:
        contents = source.read()
    if not result.faults and _fast_checks(contents, table, path, result):
        return result
    with pa.BufferReader(contents) as handle:
        try:
            check = check_parquet_file(handle, require_crc=require_crc)
        except ValueError as err:  # a column path in the footer that is not UTF-8 (a flip there)
            detail = f"footer does not read: {type(err).__name__}: {err}"
            result.faults.append(Fault(KIND_FOOTER, table, path, detail))
            result.status = "corrupt"
            return result
        result.pages, result.pages_without_crc = check.pages, check.pages_without_crc
        for f in check.faults:
            kind = KIND_FOOTER if f.row_group < 0 else KIND_PAGE
            result.faults.append(
                Fault(kind, table, path, f.detail, row_group=f.row_group, column=f.column, page=f.page)
            )
        bad_groups = set(check.corrupt_row_groups())
        try:
            parquet = pq.ParquetFile(handle, page_checksum_verification=True)
        except Exception:  # the footer does not parse: already a fault of the page walk
            parquet = None
        if parquet is not None:
            good = [g for g in range(parquet.metadata.num_row_groups) if g not in bad_groups]
            good = _decode_groups(parquet, good, table, path, result.faults)
            try:
                if table == "steps" and good:
                    result.attempts = _attempts_of(parquet, good)
                if table == "video" and good:
                    result.chunks_without_crc = _check_chunks(parquet, good, table, path, result.faults)
                elif table == "raw" and good:
                    _check_wire(parquet, good, table, path, result.faults)
            except KeyError as err:  # a column the table has is not in the footer (a flipped name)
                detail = f"the footer lacks a column of the {table} table: {err}; it is damaged"
                result.faults.append(Fault(KIND_FOOTER, table, path, detail))
            for fault in result.faults:
                if fault.row_group is not None and fault.row_group >= 0 and not fault.episodes:
                    fault.episodes = _episodes_of_group(parquet, fault.row_group)
                    if table == "raw" and fault.kind == KIND_PAGE:
                        _narrow_by_wire(handle, fault)
    if result.faults:
        result.status = "corrupt"
    elif result.pages_without_crc or result.chunks_without_crc:
        result.status = "unverifiable"
    return result


def _fast_checks(contents: bytes, table: str, path: str, result: FileResult) -> bool:
    """The whole file's checks by the fast path (`_fastscan`: C-backed page walk, one decode);
    True when it is intact (result filled in), False when the slow checks must run (anything
    found, or a page the fast walk does not know): only they report damage."""
    from pi_jobs.integrity._fastscan import intact

    parquet, rows, pages = intact(contents)
    if parquet is None or rows is None:
        return False
    groups = list(range(parquet.metadata.num_row_groups))
    faults: list[Fault] = []
    without = 0
    try:
        if table == "video":
            without = _check_chunks(parquet, groups, table, path, faults, rows=rows)
        elif table == "raw":
            _check_wire(parquet, groups, table, path, faults, rows=rows)
        attempts = _pairs(rows) if table == "steps" else []
    except Exception:  # a column the table must have is not there (a damaged footer): slow path
        return False
    if faults:
        return False
    result.pages, result.attempts = pages, attempts
    if without:
        result.chunks_without_crc = without
        result.status = "unverifiable"
    return True


def _decode_groups(parquet: Any, groups: list[int], table: str, path: str, faults: list[Fault]) -> list[int]:
    """Decode every column of `groups` as a reader would (pyarrow, page CRCs checked): a row
    group that raises is a fault (a header field no CRC covers, levels that do not add up);
    returns the groups that decode."""
    good = []
    for group in groups:
        try:
            parquet.read_row_group(group)
        except Exception as err:  # pyarrow's OSError / ArrowInvalid: what a reader would meet
            detail = (
                f"the row group does not decode: {type(err).__name__}: {' '.join(str(err).split())[:300]}"
            )
            faults.append(Fault(KIND_DECODE, table, path, detail, row_group=group))
            continue
        good.append(group)
    return good


def _attempts_of(parquet: Any, groups: list[int]) -> list[tuple[str, str]]:
    """The distinct (episode_id, attempt_id) of the rows of `groups` (they decoded)."""
    return _pairs(parquet.read_row_groups(groups, columns=["episode_id", "attempt_id"]))


def _pairs(rows: Any) -> list[tuple[str, str]]:
    """The distinct (episode_id, attempt_id) of a table's rows."""
    pairs = zip(rows.column("episode_id").to_pylist(), rows.column("attempt_id").to_pylist(), strict=True)
    return sorted({(str(e), str(a)) for e, a in pairs if e is not None and a is not None})


def _row_starts(parquet: Any, groups: list[int]) -> np.ndarray:
    """Row group of each row of `parquet.read_row_groups(groups)`."""
    counts = [parquet.metadata.row_group(g).num_rows for g in groups]
    return np.repeat(np.array(groups, dtype=np.int64), counts)


def _check_chunks(
    parquet: Any, groups: list[int], table: str, path: str, faults: list[Fault], *, rows: Any = None
) -> int:
    """Check every video chunk of `groups` against its chunk_crc32 (`rows`: those groups already
    decoded); returns the chunks without one."""
    from pi_format.lake import CHUNK_CRC_COLUMN, chunk_crc32

    names = parquet.schema_arrow.names
    if CHUNK_CRC_COLUMN not in names:
        return sum(parquet.metadata.row_group(g).num_rows for g in groups)
    if rows is None:
        rows = parquet.read_row_groups(
            groups, columns=["episode_id", "attempt_id", "camera", "chunk_index", "data", CHUNK_CRC_COLUMN]
        )
    group_of = _row_starts(parquet, groups)
    stored = rows.column(CHUNK_CRC_COLUMN).to_pylist()
    data = rows.column("data")
    missing = 0
    for i, expected in enumerate(stored):
        if expected is None:
            missing += 1
            continue
        value = data[i].as_buffer()
        actual = chunk_crc32(memoryview(value) if value is not None else b"")
        if actual != expected:
            episode = (str(rows.column("episode_id")[i].as_py()), str(rows.column("attempt_id")[i].as_py()))
            chunk, camera = rows.column("chunk_index")[i].as_py(), rows.column("camera")[i].as_py()
            detail = f"chunk {chunk} of camera {camera}: chunk_crc32 {expected:08x} != {actual:08x}"
            faults.append(
                Fault(KIND_CHUNK, table, path, detail, row_group=int(group_of[i]), row=i, episodes=[episode])
            )
    return missing


def _check_wire(
    parquet: Any, groups: list[int], table: str, path: str, faults: list[Fault], *, rows: Any = None
) -> None:
    """Decode every raw message that decoded at ingest (its chunk_index is set): its wire CRC
    (and header) must still check (`rows`: those groups already decoded)."""
    from pi_format import ProtocolError
    from pi_format.wire import decode_chunk

    if rows is None:
        rows = parquet.read_row_groups(groups, columns=["episode_id", "attempt_id", "chunk_index", "message"])
    group_of = _row_starts(parquet, groups)
    chunk_index = rows.column("chunk_index").to_pylist()
    messages = rows.column("message")
    for i, index in enumerate(chunk_index):
        if index is None:  # never decoded: quarantined at ingest, kept as received
            continue
        try:
            decode_chunk(messages[i].as_py())
        except ProtocolError as err:
            episode = (str(rows.column("episode_id")[i].as_py()), str(rows.column("attempt_id")[i].as_py()))
            faults.append(
                Fault(
                    KIND_WIRE,
                    table,
                    path,
                    f"message of chunk {index}: {err}",
                    row_group=int(group_of[i]),
                    row=i,
                    episodes=[episode],
                )
            )


def _episodes_of_group(parquet: Any, group: int) -> list[tuple[str, str]]:
    """(episode_id, attempt_id) of the rows of one row group, read with page CRCs checked; []
    when those columns are damaged too (the caller reports the file's episodes instead)."""
    names = parquet.schema_arrow.names
    if "episode_id" not in names or "attempt_id" not in names:
        return []
    try:
        rows = parquet.read_row_group(group, columns=["episode_id", "attempt_id"])
    except Exception:  # the id columns' pages are damaged too
        return []
    pairs = {
        (str(e), str(a))
        for e, a in zip(
            rows.column("episode_id").to_pylist(), rows.column("attempt_id").to_pylist(), strict=True
        )
        if e is not None
    }
    return sorted(pairs)


def _narrow_by_wire(handle: Any, fault: Fault) -> None:
    """A damaged raw page: read its row group without the page check and decode each message;
    the episodes whose messages fail their wire CRC are the damaged ones (a message that decodes
    proves its bytes by its own CRC). When none fails (the damage is in another column), every
    episode of the row group stays named."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pi_format import ProtocolError
    from pi_format.wire import decode_chunk

    parquet = pq.ParquetFile(handle)
    group = int(fault.row_group or 0)
    try:
        rows = parquet.read_row_group(group, columns=["episode_id", "attempt_id", "chunk_index", "message"])
    except Exception:  # the id column does not decode: the messages carry the ids
        try:
            rows = parquet.read_row_group(group, columns=["attempt_id", "chunk_index", "message"])
        except Exception:  # does not even decode: the row group's episodes stay as named
            return
        rows = rows.append_column("episode_id", pa.nulls(rows.num_rows, pa.string()))
    failing: set[tuple[str, str]] = set()
    carried: set[tuple[str, str]] = set()  # the episode ids the messages themselves carry
    messages = rows.column("message")
    for i, index in enumerate(rows.column("chunk_index").to_pylist()):
        if index is None:
            continue
        try:
            chunk = decode_chunk(messages[i].as_py())
            carried.add((str(chunk.episode_id), str(rows.column("attempt_id")[i].as_py())))
        except ProtocolError:
            episode, attempt = rows.column("episode_id")[i].as_py(), rows.column("attempt_id")[i].as_py()
            if episode is not None:
                failing.add((str(episode), str(attempt)))
    if failing:
        fault.detail += f"; messages of {len(failing)} episode(s) fail their wire CRC"
        fault.episodes = sorted(failing)
    else:
        fault.detail += "; every message of the row group still checks by its wire CRC"
        if not fault.episodes:  # the id column itself is damaged: the messages name theirs
            fault.episodes = sorted(carried)
