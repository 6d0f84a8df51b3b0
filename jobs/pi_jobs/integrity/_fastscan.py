"""The fast path of `pilake verify`'s check of one Parquet file: it can only say "intact".

`check_file` used to walk every page with the Thrift parser written in Python
(`check_parquet_file`, ~20 us a page, with each page decompressed again) and then decode the
file one row group at a time (a video file has ~1,200): 3.5 MB/s on the million-episode lake.
Here each column chunk the footer lists is walked by `pi_format.lake.page_walk.walk` (the
header shapes pyarrow writes for the lake's pages parsed by numpy for every chunk at once, each
page's CRC taken by zlib; `dataset copy` and Dataset's open run the same walk), held with
`strict` to everything the slow walk holds it to: a CRC on every page, the page type its
header shape says, sizes that are not negative and stay inside the column chunk, an uncompressed
page as long as it says, data-page encodings among the footer's and data-page value counts that
add up to the footer's. Then the whole file is decoded in one pyarrow read with its page CRCs
checked (pyarrow also refuses a page that does not decompress to its stated size).

Anything else (another header shape, a page without a CRC, any mismatch, a read that raises)
makes `intact` False, and the caller runs the authoritative slow check, which names the fault:
the fast path never reports damage itself, so a damaged file's report is the slow path's, word
for word.

Example:
    >>> parquet, rows, pages = intact(data)
    >>> pages  # 0 when the slow check must decide
    412
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from pi_format.lake.page_walk import walk as _walk


def walk(data: bytes, metadata: Any) -> int:
    """The pages of the file `data` when every one passes (see the module docstring), else 0:
    `pi_format.lake.page_walk.walk` with its strict rules (the copy and the loader run the same
    walk without the footer's encodings, value counts and uncompressed sizes)."""
    return _walk(data, metadata, strict=True) or 0


def intact(data: bytes) -> tuple[Any, pa.Table | None, int]:
    """(the pyarrow ParquetFile, the whole file decoded, its page count) when the file `data`
    passes the fast walk and decodes in one read with page CRCs checked; (None, None, 0)
    otherwise (the slow check decides)."""
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(pa.BufferReader(data), page_checksum_verification=True)
        pages = walk(data, parquet.metadata)
        if not pages:
            return None, None, 0
        rows = parquet.read(use_threads=False)
    except Exception:  # pyarrow's OSError / ArrowInvalid / ValueError: the slow check names it
        return None, None, 0
    return parquet, rows, pages
