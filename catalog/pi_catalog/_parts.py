"""Keeping the index table's parts bounded on an embedded (chdb) engine.

Every insert writes a part; background merges fold small parts into larger ones, and the parts
a merge replaced stay on disk, outdated, until ClickHouse's cleanup removes them. An engine
that lives for one call never cleans up at all (each start then loaded every one of them:
record time grew with the table); a long-lived one with chdb's defaults cleans up after ~30 s.
The index table is therefore created with a cleanup every second (`_schema.INDEX_SETTINGS`;
measured: a pass every ~5 s, in one thread: above 100 parts ClickHouse would start up to 128
removal threads, each keeping /proc descriptors; set by ALTER ... MODIFY SETTING instead, chdb
26.9 stopped cleaning up the table altogether, so an older catalog keeps chdb's 30 s until
`pilake catalog rebuild`); and on chdb the writer checks
the part count every `_CHECK_EVERY` inserts and waits, like ClickHouse's own
`parts_to_delay_insert`, while merges and cleanup are behind (`keep_parts_bounded`). Part
directories on disk thus stay under ~MAX_PARTS + _CHECK_EVERY whatever the table's size.
"""

from __future__ import annotations

import time
from typing import Any

from pi_catalog._errors import CatalogQueryError
from pi_catalog._schema import INDEX_TABLE

# Parts of the index table (active and outdated) above which an insert waits for the
# background, and how long at most: a bound on the part directories on disk, not a throttle in
# normal operation (~5 s of inserts between cleanup passes: ~250 parts at 50 groups/s).
MAX_PARTS = 256
_CHECK_EVERY = 16
_WAIT_S = 10.0
_POLL_S = 0.05

_PARTS_SQL = (
    f"SELECT count() AS n FROM system.parts WHERE database = currentDatabase() AND table = '{INDEX_TABLE}'"
)


def part_count(client: Any) -> int:
    """Active and outdated parts of the index table (what its directory holds, less temporary
    parts being written)."""
    try:
        table = client.query_arrow(_PARTS_SQL)
    except Exception as err:
        raise CatalogQueryError(str(err), _PARTS_SQL) from err
    return int(table.column("n")[0].as_py())


def keep_parts_bounded(client: Any, inserts: int) -> None:
    """Every `_CHECK_EVERY` inserts: while the index table has more than MAX_PARTS parts, wait
    up to `_WAIT_S` for merges and cleanup to catch up."""
    if inserts % _CHECK_EVERY:
        return
    deadline = time.monotonic() + _WAIT_S
    while part_count(client) > MAX_PARTS and time.monotonic() < deadline:
        time.sleep(_POLL_S)
