"""`pilake verify --workers N`: the files' checks in N processes, their results in file order.

Each file's check (`_scan.check_file`) is independent and mostly CPU (the page walk, the CRCs,
the decode), so N worker processes check N files at once; the results come back in the order
the files were listed, so the state file, the progress bar and the report are the same as with
one process (a killed run resumes from the files whose results were recorded). The workers are
started by `spawn` (nothing inherited from the caller's threads: deltalake's runtime, pyarrow's
pools) and cost ~1 s each to start: worth it on a large lake, not on a small one.

Example:
    >>> for result in check_files(layout, [("steps", "part-0.parquet", 1234)], {"steps"}, workers=2):
    ...     print(result.status)
    ok
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor

from pi_format import LakeLayout

from pi_jobs.integrity._scan import FileResult, check_file


def check_one(layout: LakeLayout, table: str, path: str, size: int, require_crc: bool) -> FileResult:
    """One file's checks (in the caller or a worker process)."""
    from pi_format.lake import table_filesystem

    fs, base = table_filesystem(layout.table(table))
    return check_file(fs, base, table, path, size, require_crc=require_crc)


def _check_one_dict(
    layout: LakeLayout, table: str, path: str, size: int, require_crc: bool
) -> dict[str, object]:
    return check_one(layout, table, path, size, require_crc).as_dict()


def check_files(
    layout: LakeLayout, files: list[tuple[str, str, int]], required: set[str], *, workers: int = 1
) -> Iterator[FileResult]:
    """Each file's FileResult, in the order of `files` ((table, path, logged size)); `required`:
    the tables whose every page must carry a CRC."""
    if workers <= 1 or len(files) <= 1:
        for table, path, size in files:
            yield check_one(layout, table, path, size, table in required)
        return
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        results = pool.map(
            _check_one_dict,
            *zip(*((layout, t, p, s, t in required) for t, p, s in files), strict=True),
        )
        for doc in results:
            yield FileResult.from_dict(doc)
