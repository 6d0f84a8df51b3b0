"""What `pilake ui` serves and how: the lake, the catalog, the address, and the query limits.

Parsed from the command line at the edge (pi_jobs.cli._ui) and validated here, once.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from pathlib import Path

# Addresses that only this machine reaches: no token needed there.
_LOOPBACK_NAMES = frozenset({"localhost"})


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and "localhost".

    Example:
        >>> is_loopback("127.0.0.1"), is_loopback("0.0.0.0")
        (True, False)
    """
    if host in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True, slots=True)
class UiConfig:
    """Options of the lake browser.

    Args:
        lake_root: the lake (a local directory; video is remuxed from its `video` table).
        catalog: the catalog (a chdb path or a ClickHouse URL) that Overview and Query read.
        host: the address to bind. Loopback by default: the UI shows every episode of the lake.
        port: the TCP port (0: any free port).
        token: required on every request when set; must be set for a non-loopback host.
        cache_dir: where remuxed MP4 files are kept (one per episode attempt and camera).
        log_dirs: JSON event logs the Episode page's trace reads.
        row_cap: most rows a Query page shows (the query is wrapped in LIMIT row_cap + 1).
        query_timeout_s: ClickHouse's max_execution_time for a user's query.
        page_size: rows per page of the Query, Quarantine and Pins pages.
        query_memory_bytes: ClickHouse's max_memory_usage for a user's query.
        query_threads: ClickHouse's max_threads for a user's query.
        query_result_rows, query_result_bytes: most rows / bytes a statement of the Query page
            may return (a page, its count, the parse tree the screen reads); more is an error.
        max_running_queries: users' queries that run at once.
        max_waiting_queries: more that wait for a turn; beyond them a query is refused at once.
        query_wait_s: how long a query waits for a turn before it is refused (HTTP 503).
        max_sql_chars: the longest query text the Query page takes.
        robots: the robot registry whose `proprio_names`/`action_names` name the plots'
            dimensions (PILAKE_ROBOTS); None: the one shipped with pi_jobs.

    Raises:
        ValueError: a bad port, limit, or a non-loopback host without a token.

    Example:
        >>> UiConfig(lake_root="/data/lake", catalog="/data/catalog", cache_dir=Path("/tmp/ui"))
    """

    lake_root: str
    catalog: str
    cache_dir: Path
    host: str = "127.0.0.1"
    port: int = 8765
    token: str | None = None
    log_dirs: tuple[Path, ...] = ()
    # 10,000 rows: a page of a large selection renders in well under a second and a table that
    # long is already more than anyone reads; the pin command carries the SQL for all of them.
    row_cap: int = 10_000
    # 10 s: a typical catalog query on 100k episodes takes milliseconds; a runaway one must not
    # hold the catalog (other processes wait for its lock meanwhile).
    query_timeout_s: float = 10.0
    # 50 rows per page keeps every page small on a 100k-episode lake (benchmarks/ui).
    page_size: int = 50
    # 512 MiB: a GROUP BY over the whole catalog of 100k episodes needs tens of MB; a groupArray
    # over 1e8 rows took the UI from 0.7 to 2.6 GB before there was a limit. Times
    # max_running_queries is the most users' SQL adds to the UI process.
    query_memory_bytes: int = 512 * 1024**2
    # 1 thread: a user's query shares the UI's host with the pages and other users' queries; a
    # catalog query over 100k episodes takes milliseconds on one. With 2 threads each, two heavy
    # queries took both cores of a 2-core host and a page of 10k episodes neared 1 s.
    query_threads: int = 1
    # 100,000 rows / 64 MiB: far above a page (page_size rows of cells cut to 200 characters)
    # and the engine's function list read once (~1,900 rows), far below what exhausts memory.
    query_result_rows: int = 100_000
    query_result_bytes: int = 64 * 1024**2
    # 2 at once, 4 waiting for up to 15 s: a turn comes free within one time limit (10 s), so
    # a waiter behind two runaway queries still gets one (with 10 s all four waiters of
    # benchmarks/ui/sql_load.py missed it by 20 ms); a researcher whose query waits longer is
    # better told to retry than left hanging, and every waiter holds one of the server's 40
    # worker threads, which the other pages need.
    max_running_queries: int = 2
    max_waiting_queries: int = 4
    query_wait_s: float = 15.0
    # 20,000 characters: a long hand-written SELECT is a few hundred.
    max_sql_chars: int = 20_000
    robots: str | None = None

    @property
    def catalog_shown(self) -> str:
        """The catalog location as pages show it: a URL's user and password left out.

        Example:
            >>> UiConfig(lake_root="/l", catalog="https://u:p@ch:8443/db", cache_dir=Path("/c")).catalog_shown
            'https://ch:8443/db'
        """
        return re.sub(r"^([a-z][a-z0-9+.-]*://)[^/@]*@", r"\1", self.catalog, flags=re.I)

    def __post_init__(self) -> None:
        if not self.lake_root:
            raise ValueError("lake_root must name the lake (PILAKE_LAKE), got ''")
        if "://" in self.lake_root and not self.lake_root.startswith("file://"):
            raise ValueError(
                f"the UI reads a local lake, got {self.lake_root!r}; run it where the lake is mounted"
            )
        if not self.catalog:
            raise ValueError("catalog must name the catalog (PILAKE_CATALOG), got ''")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must be in 0..65535, got {self.port}")
        if self.row_cap < 1:
            raise ValueError(f"row_cap must be >= 1, got {self.row_cap}")
        if not self.query_timeout_s > 0:
            raise ValueError(f"query_timeout_s must be > 0 seconds, got {self.query_timeout_s}")
        if self.page_size < 1:
            raise ValueError(f"page_size must be >= 1, got {self.page_size}")
        for name in (
            "query_memory_bytes",
            "query_threads",
            "query_result_rows",
            "query_result_bytes",
            "max_running_queries",
            "max_sql_chars",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.query_result_rows < self.page_size:
            raise ValueError(
                f"query_result_rows ({self.query_result_rows}) must be >= page_size ({self.page_size})"
            )
        if self.max_waiting_queries < 0:
            raise ValueError(f"max_waiting_queries must be >= 0, got {self.max_waiting_queries}")
        if not self.query_wait_s >= 0:
            raise ValueError(f"query_wait_s must be >= 0 seconds, got {self.query_wait_s}")
        if self.token is not None and len(self.token) < 16:
            raise ValueError(f"token must be at least 16 characters, got {len(self.token)}")
        if not is_loopback(self.host) and self.token is None:
            raise ValueError(
                f"host {self.host!r} is reachable from other machines: pass --token (at least 16 "
                "characters), or keep the default host 127.0.0.1"
            )
