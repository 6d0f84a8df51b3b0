"""Where a catalog lives and how a process gets in: location parsing (a chdb path or an
http(s) server URL) and the clickhouse-connect client. The cross-process lock of a chdb path
and the process's engine are `_engine`'s."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from pi_catalog._errors import PiCatalogError

USER_ENV = "PILAKE_CLICKHOUSE_USER"
PASSWORD_ENV = "PILAKE_CLICKHOUSE_PASSWORD"


@dataclass(frozen=True, slots=True)
class ServerLocation:
    """A ClickHouse server's address."""

    host: str
    port: int
    database: str
    secure: bool


def parse_location(location: str) -> str | ServerLocation:
    """A chdb data path (made absolute) or a `ServerLocation`, or a ValueError saying what
    form a location takes."""
    if not isinstance(location, str | os.PathLike):
        raise TypeError(f"location must be a path or an http(s) URL string, got {type(location).__name__}")
    location = os.fspath(location)
    if not location:
        raise ValueError("location must be a filesystem path or 'http://host:port[/db]', got ''")
    if location.startswith(("http://", "https://")):
        parts = urlsplit(location)
        if parts.username is not None or parts.password is not None:
            # The location is printed in errors and reprs: credentials must not be part of it.
            raise ValueError(
                f"location {parts.scheme}://...@{parts.hostname}{parts.path} carries credentials; "
                f"remove them from the URL and set {USER_ENV} / {PASSWORD_ENV} instead"
            )
        if not parts.hostname:
            raise ValueError(f"location {location!r} has no host; use 'http://host:port[/db]'")
        secure = parts.scheme == "https"
        database = parts.path.strip("/") or "default"
        if "/" in database:
            raise ValueError(f"location {location!r}: the path must be one database name, got {database!r}")
        return ServerLocation(parts.hostname, parts.port or (8443 if secure else 8123), database, secure)
    if "://" in location:
        raise ValueError(
            f"location {location!r} is neither a filesystem path (chdb) nor an http(s):// URL "
            "(ClickHouse server)"
        )
    return os.path.abspath(location)


def connect(
    target: str | ServerLocation, location: str, *, user_env: str = USER_ENV, password_env: str = PASSWORD_ENV
) -> Any:
    """A clickhouse-connect client for a chdb path or a server (credentials from the environment
    variables `user_env` / `password_env`; never echoed in errors).

    Example:
        >>> client = connect("/data/catalog", "/data/catalog")
    """
    try:
        import clickhouse_connect
    except ImportError as err:
        raise ImportError(
            "pi_catalog needs clickhouse-connect and chdb: pip install 'pi-lake[catalog]'"
        ) from err
    try:
        if isinstance(target, str):
            os.makedirs(target, exist_ok=True)
            return clickhouse_connect.get_client(dsn=f"chdb://{target}")
        return clickhouse_connect.get_client(
            host=target.host,
            port=target.port,
            database=target.database,
            secure=target.secure,
            username=os.environ.get(user_env, "default"),
            password=os.environ.get(password_env, ""),
        )
    except Exception as err:
        # Never echo credentials: the message names the location and the user only.
        hint = _hint(err, target, user_env, password_env)
        raise PiCatalogError(f"cannot open the catalog at {location}: {err}{hint}") from err


# ClickHouse's authentication error codes: REQUIRED_PASSWORD, UNKNOWN_USER, WRONG_PASSWORD,
# AUTHENTICATION_FAILED.
_AUTH_CODES = frozenset({194, 192, 193, 516})


def _hint(err: Exception, target: str | ServerLocation, user_env: str, password_env: str) -> str:
    """What to do about a failed connect, by what clickhouse-connect raised."""
    if isinstance(target, str):
        return ""
    from clickhouse_connect.driver.exceptions import DatabaseError, OperationalError

    if isinstance(err, DatabaseError) and getattr(err, "code", None) in _AUTH_CODES:
        user = os.environ.get(user_env, "default")
        return f"; the server refused user {user!r}: check {user_env} and {password_env}"
    if isinstance(err, OperationalError):
        return f"; is a ClickHouse server running and reachable at {target.host}:{target.port}?"
    return ""
