"""Exceptions of pi_catalog: one root, a lock timeout and a failed query."""

from __future__ import annotations


class PiCatalogError(Exception):
    """Root of every error pi_catalog raises."""


class CatalogLockTimeout(PiCatalogError):
    """Another process held the catalog's lock for longer than `lock_timeout_s`.

    Example:
        >>> try:
        ...     Catalog("/data/catalog", lock_timeout_s=1.0).query_arrow("SELECT 1")
        ... except CatalogLockTimeout as err:
        ...     print(err.lock_path)
    """

    def __init__(self, lock_path: str, timeout_s: float) -> None:
        super().__init__(
            f"could not lock the catalog within {timeout_s} s: another process holds {lock_path} "
            "(a stream job or a long query); retry, or raise lock_timeout_s"
        )
        self.lock_path = lock_path
        self.timeout_s = timeout_s


class CatalogQueryError(PiCatalogError):
    """ClickHouse rejected a statement; carries ClickHouse's message and the SQL.

    Example:
        >>> try:
        ...     catalog.query_arrow("SELECT nope FROM episodes")
        ... except CatalogQueryError as err:
        ...     print(err.sql)
        SELECT nope FROM episodes
    """

    def __init__(self, message: str, sql: str) -> None:
        super().__init__(f"{message}\n  in SQL: {sql}")
        self.detail = message
        self.sql = sql
