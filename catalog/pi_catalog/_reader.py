"""A reader of its own: queries that run beside the process's other catalog calls, under
settings fixed when it opens (the lake browser's Query page runs users' SQL on one).

On chdb it is a separate handle on the process's engine (`_engine.side_handle`): chdb 4.x runs
queries on separate handles in parallel, and the handle's `SET`s (`readonly = 1` last) bind
every query on it without touching the engine's main client. On a server it is a client of its
own whose every query carries the settings.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa

from pi_catalog._connection import ServerLocation, connect
from pi_catalog._engine import side_handle
from pi_catalog._errors import CatalogQueryError

_SETTING_NAME = frozenset("abcdefghijklmnopqrstuvwxyz_0123456789")


def _settings(settings: Mapping[str, object]) -> tuple[tuple[str, str], ...]:
    out = []
    for name, value in settings.items():
        if not name or set(name) - _SETTING_NAME:
            raise ValueError(f"setting names are lower-case words, got {name!r}")
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise TypeError(f"setting {name} must be an int, float or str, got {type(value).__name__}")
        text = (
            repr(value)
            if isinstance(value, str)
            else f"{value:g}"
            if isinstance(value, float)
            else str(value)
        )
        out.append((name, text))
    return tuple(out)


class IsolatedReader:
    """Runs read queries under fixed settings (see `Catalog.isolated_reader`)."""

    def __init__(self, handle: Any, settings: tuple[tuple[str, str], ...], *, server: bool) -> None:
        self._handle = handle
        self._settings = settings
        self._server = server

    def query_arrow(self, sql: str) -> pa.Table:
        """The result of one statement as Arrow.

        Raises:
            CatalogQueryError: ClickHouse refused or failed it (its message and the SQL).

        Example:
            >>> with catalog.isolated_reader({"readonly": 1}) as reader:
            ...     reader.query_arrow("SELECT count() AS n FROM episodes")
        """
        try:
            if self._server:
                result: pa.Table = self._handle.query_arrow(sql, settings=dict(self._settings))
            else:
                result = self._handle.query(sql, "ArrowTable")
        except Exception as err:
            raise CatalogQueryError(str(err), sql) from err
        return result

    def query_text(self, sql: str) -> str:
        """The result of one statement as text, one row a line (TabSeparated; nothing is
        appended to the statement, where `query_arrow` adds a FORMAT clause on a server).

        Raises:
            CatalogQueryError: ClickHouse refused or failed it.

        Example:
            >>> reader.query_text("EXPLAIN AST SELECT 1").splitlines()[0]
            'SelectWithUnionQuery (children 1)'
        """
        try:
            if self._server:
                raw: bytes = self._handle.raw_query(sql, settings=dict(self._settings))
            else:
                raw = self._handle.query(sql, "TSVRaw").bytes()
        except Exception as err:
            raise CatalogQueryError(str(err), sql) from err
        return raw.decode("utf-8", errors="replace")


@contextlib.contextmanager
def isolated_reader(
    target: str | ServerLocation,
    location: str,
    lock_timeout_s: float,
    settings: Mapping[str, object],
    credentials_env: tuple[str, str] | None = None,
) -> Iterator[IsolatedReader]:
    fixed = _settings(settings)
    if isinstance(target, str):
        with side_handle(target, location, lock_timeout_s, fixed) as handle:
            yield IsolatedReader(handle, fixed, server=False)
        return
    if credentials_env is not None and credentials_env[0] in os.environ:
        client = connect(target, location, user_env=credentials_env[0], password_env=credentials_env[1])
    else:
        client = connect(target, location)
    try:
        # over HTTP the values travel as URL parameters, unquoted
        yield IsolatedReader(client, tuple((k, str(v)) for k, v in settings.items()), server=True)
    finally:
        client.close()
