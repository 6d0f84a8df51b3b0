"""What the first read of a video chunk learned, so a read of it again skips the index lookup and
the page-header parse.

A chunk read through the chunk index is one Parquet data page; `_chunk_index.page_value` parses
its Thrift header in Python (~2.5 us of the ~19 us a chunk read costs on the per-sample path:
benchmarks/loader/PROFILE.md), checks its CRC and slices the value out. Lake files never change,
so what the header said the first time is what it says every time: this memo keeps, per chunk,
the header's bytes (with the value's 4-byte length) and what they said, and the chunk's row of
the chunk index once it passed the reader's checks (where its bytes lie, its frames and size:
~3 us of index row read and checks). A later read whose bytes
start with exactly those bytes and have the same size takes the value without the parse; its
CRC is still computed over the page every time, and any difference (a changed header, size or
CRC) goes through `page_value` again, which raises the same `CorruptDataError` it always did.
"""

from __future__ import annotations

from collections.abc import Hashable

from pi_format.checksum import crc32

from pi_loader.reading._chunk_index import _page_header_fields, page_value

# Chunks remembered per process: an entry is ~250 bytes (its key, ~20 header bytes, the index
# row's six ints), so 65,536 chunks (a 2-hour 3-camera 15 Hz lake of 10-frame chunks, as
# ACCESS_UNIT_MEMO) hold ~16 MB; past that the oldest are forgotten and read in full again.
KNOWN_PAGES = 65_536


class KnownPages:
    """`page_value` with the header parse skipped for chunks seen before (same bytes, same size).

    Not thread-safe on its own: a lost update only costs a parse. Example:
        >>> pages = KnownPages()
        >>> value = pages.value((e, camera, chunk), raw, uri, group)   # == page_value(raw, uri, group)
    """

    def __init__(self, capacity: int = KNOWN_PAGES) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        # key -> (size of the column chunk, header bytes + the value's length, CRC or None,
        # the caller's checked index row)
        self._known: dict[Hashable, tuple[int, bytes, int | None, tuple[int, ...]]] = {}
        self.parses = 0  # headers parsed (first reads, and reads whose bytes differ)

    def __len__(self) -> int:
        return len(self._known)

    def entry(self, key: Hashable) -> tuple[int, ...] | None:
        """The index row passed to `value` with the chunk's last good read, or None."""
        known = self._known.get(key)
        return None if known is None else known[3]

    def value(self, key: Hashable, raw: bytes, uri: str, group: int, entry: tuple[int, ...] = ()) -> bytes:
        """The value of the one-value page `raw` (see `page_value`, whose errors it raises);
        `entry` (the chunk's checked index row) is kept with its layout for `entry(key)`.

        Raises:
            CorruptDataError: the page's bytes do not match its CRC, or do not parse.
            PiLoaderError: `raw` is not such a page.
        """
        known = self._known.get(key)
        if known is not None and known[0] == len(raw) and raw.startswith(known[1]):
            prefix, crc = len(known[1]), known[2]
            if crc is None or crc32(memoryview(raw)[prefix - 4 :]) & 0xFFFFFFFF == crc:
                return raw[prefix:]
            # damaged since: page_value words the refusal as on a first read
        value = page_value(raw, uri, group)
        self.parses += 1
        header_bytes, _, crc = _page_header_fields(raw, len(raw))  # parsed fine just above
        if len(self._known) >= self.capacity:
            self._known.pop(next(iter(self._known)), None)
        crc = None if crc is None else crc & 0xFFFFFFFF
        self._known[key] = (len(raw), bytes(raw[: header_bytes + 4]), crc, entry)
        return value
