"""The page walk of `pi_format.lake.page_walk`, vectorised over column chunks with numpy.

A lake file holds thousands of column chunks of one or two pages each (a video file: 1,080 one-row
row groups of 12 columns). Walking them one page at a time in Python cost ~3 us a page; here
every chunk's next page header is parsed at once, in rounds (round k parses the k-th page of
every chunk that has one), by numpy, one byte offset of every header at a time: the two header
shapes pyarrow writes for the lake's pages (a v1 data page without statistics, a dictionary page,
both with a CRC), byte for byte what the regular expressions of `page_walk` match. A header of
another shape (a data page with statistics) leaves its chunk to the caller's page-by-page walk
from that page on, so the verdict is the per-page walk's in every case. The CRCs are then taken
by zlib-ng (`pi_format.checksum`), one call a page.

Example:
    >>> scan(data, starts, ends, plain, allowed)  # None: a chunk failed; else the pages walked
    (12960, [], values)
"""

from __future__ import annotations

import numpy as np

from pi_format.checksum import crc32

_DATA, _DICTIONARY = 0, 2


class _Bytes:
    """The bytes at `pos + offset` of the file for every header at once (one numpy take each);
    an offset past the file's end reads its last byte: such a header runs past its chunk's end,
    which fails it."""

    def __init__(self, buf: np.ndarray, pos: np.ndarray) -> None:
        self.buf, self.pos, self.last = buf, pos, len(buf) - 1

    def at(self, offset: np.ndarray | int) -> np.ndarray:
        return self.buf.take(np.minimum(self.pos + offset, self.last))


def _varint(data: _Bytes, at: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(zigzag value, bytes taken, found, first byte) of the varint at `at` of each header: 1 to
    5 bytes, the last under 0x80 (page_walk's `[\x80-\xff]{0,4}[\x00-\x7f]`)."""
    first = data.at(at)
    value = (first & 0x7F).astype(np.int64)
    taken = np.ones(len(at), dtype=np.int64)
    going = first >= 0x80
    for k in range(1, 5):
        if not going.any():
            break
        raw = data.at(at + k)
        value |= np.where(going, (raw & 0x7F).astype(np.int64) << (7 * k), 0)
        taken += going
        going &= raw >= 0x80
    found = ~going
    return (value >> 1) ^ -(value & 1), taken, found, first


def _fields(data: _Bytes, at: np.ndarray, ok: np.ndarray, count: int) -> list[tuple[np.ndarray, ...]]:
    """`count` i32 fields (0x15, varint) of each header from `at`; `ok` and `at` are updated."""
    out: list[tuple[np.ndarray, ...]] = []
    for _ in range(count):
        ok &= data.at(at) == 0x15
        value, taken, found, first = _varint(data, at + 1)
        ok &= found
        at += 1 + taken
        out.append((value, taken, first))
    return out


def _headers(buf: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, ...]:
    """(matched, page type, uncompressed, stored, crc, value count, encoding bytes, first body
    byte) of the header at each position; the encodings are the three raw i32 bytes of a data
    page (0xFF for a varint of more than one byte, 0xFE for a dictionary page's none)."""
    data = _Bytes(buf, pos)
    n = len(pos)
    at = np.zeros(n, dtype=np.int64)
    ok = np.ones(n, dtype=bool)
    (kind, _, _), (unpacked, _, _), (stored, _, _), (crc, _, _) = _fields(data, at, ok, 4)
    marker = data.at(at)
    is_data = marker == 0x1C
    ok &= is_data | (marker == 0x3C)
    at += 1
    # a data page: num_values, encoding, definition and repetition level encodings, an empty
    # statistics struct or none, STOP, STOP
    data_at, data_ok = at.copy(), ok & is_data
    fields = _fields(data, data_at, data_ok, 4)
    encodings = np.stack([np.where(t == 1, f, 0xFF) for _, t, f in fields[1:]], axis=1)
    stats = data.at(data_at) == 0x1C
    data_ok &= ~stats | (data.at(data_at + 1) == 0)
    data_at += np.where(stats, 2, 0)
    data_ok &= (data.at(data_at) == 0) & (data.at(data_at + 1) == 0)
    # a dictionary page: num_values, encoding, is_sorted optional, STOP, STOP
    dict_at, dict_ok = at.copy(), ok & ~is_data
    _fields(data, dict_at, dict_ok, 2)
    dict_at += np.isin(data.at(dict_at), (0x11, 0x12))
    dict_ok &= (data.at(dict_at) == 0) & (data.at(dict_at + 1) == 0)
    matched = np.where(is_data, data_ok, dict_ok)
    count = np.where(is_data, fields[0][0], -1)
    encodings = np.where(is_data[:, None], encodings, 0xFE)
    body = pos + np.where(is_data, data_at, dict_at) + 2
    return matched, kind, unpacked, stored, crc, count, encodings, body


def scan(
    data: bytes | memoryview,
    starts: np.ndarray,
    ends: np.ndarray,
    plain: np.ndarray,
    allowed: np.ndarray,
) -> tuple[int, list[tuple[int, int]], np.ndarray] | None:
    """Walk every chunk [starts, ends) of the file `data`: None when a page breaks a rule of
    `page_walk.walk` (a page type other than data or dictionary, a negative size or value count,
    a stored size unlike the uncompressed one in an uncompressed chunk (`plain`), an encoding
    outside the chunk's `allowed` bit mask (0: not checked), a page past its chunk, a CRC that
    does not match); else (pages walked, (chunk, position) of every chunk left at a header of
    another shape, the data-page value count of every chunk so far)."""
    buf = np.frombuffer(data, dtype=np.uint8)
    pos = starts.astype(np.int64)
    counted = np.zeros(len(starts), dtype=np.int64)
    active = np.arange(len(starts))
    left: list[tuple[int, int]] = []
    spans: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    pages = 0
    while active.size:
        here, end = pos[active], ends[active]
        matched, kind, unpacked, stored, crc, count, encodings, body = _headers(buf, here)
        matched &= body <= end
        left.extend(zip(active[~matched].tolist(), here[~matched].tolist(), strict=True))
        if not matched.all():
            active, here, end = active[matched], here[matched], end[matched]
            kind, unpacked, stored, crc = kind[matched], unpacked[matched], stored[matched], crc[matched]
            count, encodings, body = count[matched], encodings[matched], body[matched]
        is_data = kind == _DATA
        if np.any(~is_data & (kind != _DICTIONARY)) or np.any(is_data & (count < 0)):
            return None
        mask = allowed[active][:, None]
        even = (encodings & 1) == 0
        bit = np.where(encodings < 0x80, encodings >> 1, 63).astype(np.int64)  # bit 63: never allowed
        permitted = (mask == 0) | (even & (((mask >> bit) & 1) == 1))
        if np.any(is_data & ~permitted.all(axis=1)):
            return None
        if np.any((unpacked < 0) | (stored < 0) | (plain[active] & (stored != unpacked))):
            return None
        stop = body + stored
        if np.any(stop > end):
            return None
        np.add.at(counted, active[is_data], count[is_data])
        spans.append((body, stop, crc & 0xFFFFFFFF))
        pages += len(active)
        pos[active] = stop
        active = active[stop < end]
    view = memoryview(data)
    for body, stop, crc in spans:
        for first, last, want in zip(body.tolist(), stop.tolist(), crc.tolist(), strict=True):
            if crc32(view[first:last]) != want:
                return None
    return pages, left, counted
