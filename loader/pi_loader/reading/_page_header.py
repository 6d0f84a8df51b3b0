"""The header of a Parquet page (Thrift compact `PageHeader`), parsed without pyarrow: what
`_parquet_pages` (steps column chunks) reads before each page, and what it checks the page's
CRC against.

One parser for the lake: it lives in `pi_format.lake._page_header`, where the scrub
(`pilake verify`) and the writer's checks use it too (architecture decision 10); this module
names it for pi_loader's readers. `page_header` first tries a one-pass parse of the shape
pyarrow writes for a v1 data page (fields 1, 2, 3, [4 = crc,] 5 = {1, 2, 3, 4, [5 = {}]}, each an
i32 in order: ~3x cheaper), and otherwise parses every field, skipping unknown ones as the
Thrift compact protocol says. Anything that does not parse raises `PageError`.
"""

from __future__ import annotations

from pi_format.lake._page_header import (
    DATA_PAGE,
    PLAIN,
    RLE,
    PageError,
    PageHeader,
    _any_header,
    _plain_header,
    page_header,
)

__all__ = [
    "DATA_PAGE", "PLAIN", "RLE", "PageError", "PageHeader", "_any_header", "_plain_header", "page_header",
]  # fmt: skip
