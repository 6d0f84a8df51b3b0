"""A host-wide index of each steps file, so a cold sample reads the steps it needs without
parsing the file's Parquet footer.

A steps file of a group commit holds each of its episodes in row groups of a fixed number of
steps (SPEC.md §7.8; one row group per episode in files written before 2026-11-24): 50 episodes
make a footer of hundreds of row groups x 7 columns, tens of kB that pyarrow parses into ~10x
that. Under a global shuffle of a large lake the per-process footer cache rarely hits, so every
cold sample used to read and parse a footer for a few kB of steps. Instead, the first process of
a host that needs a steps file indexes it once (`_host_index`: built under a per-name flock,
saved atomically as `.npy`, mapped by every process), one int64 row per row group:

- KEY: the 64-bit identity of the row group's (episode_id, attempt_id) (`steps_key`);
- ROWS: its row count; START: its first step_index; EXACT: 1 when its rows are one (episode,
  attempt) with step_index exactly START..START+ROWS-1 in order (checked from the file itself
  when it was indexed);
- for each of proprio, action, camera_frame_index (`LIST_COLUMNS`): the (OFFSET, SIZE) of its
  column chunk, the list WIDTH (the footer's value count / rows; checked on every read), the
  column's MAX_DEF (definition level of a present value) and its CODEC (`_parquet_pages.CODECS`).

A window of an episode's steps is then one ranged read of the three column chunks of each row
group it covers (consecutive as the writer lays them out, apart only by pyarrow's ~50-byte
inline copy of each chunk's metadata and, between row groups, the small identity columns;
otherwise one read each), decoded by `_parquet_pages.decode_list_chunk`.

Files whose layout does not allow it (a list column that is dictionary-encoded, of another
physical or logical type, nested otherwise, of an unsupported codec, or of data page v2) get an
empty index, and `StepsReader` reads them through pyarrow as before; so does a row group the
index does not vouch for (not EXACT, no uniform width) or one whose pages hold empty lists,
nulls or rows of other widths, so results and errors are those of the row-group path.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pi_loader.reading._host_index import HostIndex, file_key
from pi_loader.reading._parquet_pages import CODECS, DATA_PAGE, PageError, page_header
from pi_loader.reading._row_groups import RowGroupReader

# Columns of an index row (one per row group of the steps file); per list column c (in
# LIST_COLUMNS order), its fields are at list_field(c, OFFSET) etc.
KEY, ROWS, EXACT, START = range(4)
OFFSET, SIZE, WIDTH, MAX_DEF, CODEC = range(5)
_PER_COLUMN = 5
_ROW_FIELDS = 4
LIST_COLUMNS = (("proprio", "FLOAT"), ("action", "FLOAT"), ("camera_frame_index", "INT32"))
_INDEX_COLUMNS = _ROW_FIELDS + _PER_COLUMN * len(LIST_COLUMNS)
_ROW_COLUMNS = ("episode_id", "attempt_id", "step_index")
_ENCODINGS = frozenset({"PLAIN", "RLE"})
_PAGE_HEADER_PROBE = 256  # bytes read of a chunk to check its first page header when indexing


def list_field(column: int, field: int) -> int:
    """The index column of `field` (OFFSET, SIZE, WIDTH, MAX_DEF, CODEC) of list column `column`."""
    return _ROW_FIELDS + _PER_COLUMN * column + field


def steps_key(episode_id: str, attempt_id: str) -> int:
    """The 64-bit identity of a steps row group's (episode, attempt), as the index stores it."""
    return file_key("steps", episode_id, attempt_id)


class StepsIndex(HostIndex):
    """The indexes of a lake's steps files on this host: built once per host, mapped by every
    process (see the module docstring). Thread-safe, picklable (only the directory travels).
    Counter (this process): `builds` (files indexed here).

    Example:
        >>> index = StepsIndex(index_directory("/data/lake", None))
        >>> entries = index.entries(reader, uri, reader.local_path(uri, table="steps", version=3))
        >>> entries[group, ROWS], entries[group, list_field(0, WIDTH)]   # entries.size == 0: no index
    """

    COLUMNS: ClassVar[int] = _INDEX_COLUMNS
    KIND: ClassVar[str] = "steps-v2\n"  # v2: START, and row groups that are part of an episode

    def build(self, reader: RowGroupReader, uri: str, path: str, file_size: int) -> np.ndarray:
        return build_entries(reader, uri, path, file_size)


def build_entries(reader: RowGroupReader, uri: str, path: str, file_size: int) -> np.ndarray:
    """Index the steps file `uri` at local `path` (see the module docstring); [0, columns] when
    its layout does not allow footer-free reads (its footer then stays in the reader's footer
    cache, for the row-group reads that follow)."""
    metadata = reader.footer(uri, path, keep=False)
    entries = _list_chunks(metadata, file_size)
    if entries is not None and _first_pages_are_v1(reader, uri, path, entries):
        rows = reader.read_columns(uri, path, metadata, _ROW_COLUMNS)
        start = 0
        for g in range(metadata.num_row_groups):
            n = int(entries[g, ROWS])
            group = rows.slice(start, n)
            start += n
            episode, attempt = group.column("episode_id"), group.column("attempt_id")
            first = (episode[0].as_py(), attempt[0].as_py()) if n else (None, None)
            if n == 0 or first[0] is None or first[1] is None or group.column("step_index").null_count:
                continue  # EXACT stays 0: the row-group path reports it
            same = pc.all(pc.and_(pc.equal(episode, first[0]), pc.equal(attempt, first[1]))).as_py()
            index = group.column("step_index").to_numpy(zero_copy_only=False)
            start_step = int(index[0])
            entries[g, KEY] = steps_key(*first)
            entries[g, START] = start_step
            in_order = np.array_equal(index, np.arange(start_step, start_step + n))
            entries[g, EXACT] = int(bool(same) and in_order)
        return entries
    reader.keep_footer(uri, metadata)
    return np.zeros((0, _INDEX_COLUMNS), np.int64)


def _list_chunks(metadata: pq.FileMetaData, file_size: int) -> np.ndarray | None:
    """The index without KEY, EXACT and START (zeros), or None unless every list column is a flat,
    dictionary-free, PLAIN list of 4-byte values of a supported codec inside the file."""
    schema = metadata.schema
    if metadata.num_row_groups == 0 or not set(_ROW_COLUMNS) <= set(schema.names):
        return None
    leaves = []
    for name, physical in LIST_COLUMNS:
        found = [j for j in range(len(schema)) if schema.column(j).path.split(".", 1)[0] == name]
        if len(found) != 1:
            return None
        column = schema.column(found[0])
        if (
            column.physical_type != physical
            or column.logical_type.type != "NONE"
            or column.converted_type != "NONE"
            or column.max_repetition_level != 1
            or column.max_definition_level not in (1, 2, 3)
        ):
            return None
        leaves.append((found[0], column.max_definition_level))
    out = np.zeros((metadata.num_row_groups, _INDEX_COLUMNS), np.int64)
    for g in range(metadata.num_row_groups):
        group = metadata.row_group(g)
        rows = group.num_rows
        out[g, ROWS] = rows
        for c, (j, max_def) in enumerate(leaves):
            chunk = group.column(j)
            codec = CODECS.get(chunk.compression, 0)
            if (
                not codec
                or chunk.dictionary_page_offset is not None
                or chunk.has_dictionary_page
                or "PLAIN" not in chunk.encodings
                or not set(chunk.encodings) <= _ENCODINGS
                or not 0 <= chunk.data_page_offset <= file_size - chunk.total_compressed_size
            ):
                return None
            width = chunk.num_values // rows if rows and chunk.num_values % rows == 0 else -1
            out[g, list_field(c, OFFSET)] = chunk.data_page_offset
            out[g, list_field(c, SIZE)] = chunk.total_compressed_size
            out[g, list_field(c, WIDTH)] = width
            out[g, list_field(c, MAX_DEF)] = max_def
            out[g, list_field(c, CODEC)] = codec
    return out


def _first_pages_are_v1(reader: RowGroupReader, uri: str, path: str, entries: np.ndarray) -> bool:
    """Whether the first page of each list column chunk of the first row group is a v1 data page
    (a writer writes one page version per file: v2 files are left to the row-group path)."""
    for c in range(len(LIST_COLUMNS)):
        offset, size = int(entries[0, list_field(c, OFFSET)]), int(entries[0, list_field(c, SIZE)])
        probe = reader.read_range(uri, path, offset, min(size, _PAGE_HEADER_PROBE), what="page header")
        try:
            header = page_header(probe, 0)
        except PageError:
            return False
        if header.page_type != DATA_PAGE or header.num_values is None:
            return False
    return True
