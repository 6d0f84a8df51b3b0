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
        if self.token is not None and len(self.token) < 16:
            raise ValueError(f"token must be at least 16 characters, got {len(self.token)}")
        if not is_loopback(self.host) and self.token is None:
            raise ValueError(
                f"host {self.host!r} is reachable from other machines: pass --token (at least 16 "
                "characters), or keep the default host 127.0.0.1"
            )
