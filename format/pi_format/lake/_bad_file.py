"""Naming the lake file that does not read, once a read over many files failed: pyarrow's own
message ("Unexpected end of stream", "Couldn't deserialize thrift") names no file."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from pi_format.errors import LakeError

# What a damaged Parquet file raises from pyarrow: OSError (ArrowIOError, a CRC mismatch, a short
# read) or ArrowInvalid (a footer or page header that does not parse).
UNREADABLE = (OSError, pa.ArrowException)


def name_the_bad_file(
    paths: Sequence[str],
    fs: object,
    err: BaseException,
    *,
    table: str,
    consequence: str,
    columns: Sequence[str] | None = None,
) -> LakeError:
    """The error naming which of `paths` does not read (every page's CRC checked), found by reading
    them one at a time after the read over all of them failed with `err`.

    Example:
        >>> raise name_the_bad_file(paths, fs, err, table="episodes", consequence="nothing was committed")
        Traceback (most recent call last):
        pi_format.errors.LakeError: episodes file .../part-0001.parquet does not read (...)
    """
    import pyarrow.parquet as pq

    for path in paths:
        try:
            with fs.open_input_file(path) as handle:  # type: ignore[attr-defined]
                pq.ParquetFile(handle, page_checksum_verification=True).read(
                    columns=list(columns) if columns is not None else None
                )
        except UNREADABLE as one:
            said = " ".join(str(one).split())  # pyarrow's messages end in newlines
            return LakeError(
                f"{table} file {path} does not read ({said}); {consequence}. Run `pilake verify` to "
                "see its damage, `pilake audit` for what names it and `pilake repair` to mend it"
            )
    return LakeError(f"reading the {table} files {list(paths[:3])}... failed ({err}); {consequence}")
