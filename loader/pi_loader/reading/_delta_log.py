"""The loader's reads of Delta logs: opened with retries, and listed to find the latest versions.

deltalake (delta-rs) loads a table's log at open: its checkpoint plus the JSON commits after it,
1.0-1.5 MB for a lake of some thousand commits. `open_delta` wraps that load in `_retry.retrying`
(an s3:// table only: a local path that is missing is missing, not a hiccup), with delta-rs's own
retries off and its timeouts from `RetryConfig`, so one deadline bounds it and every retry is
counted. `latest_versions` finds the newest commit of each table from a listing of `_delta_log/`
(names and sizes only, no log bytes): what `_open_cache` keys a pinned open by.

Counters (per process, in `Dataset.read_stats` and the loader's metrics): "delta_log_loads" (log
loads by deltalake) and "delta_log_bytes" (for a pinned open that missed `_open_cache`, the sizes
of the log files the load reads, from the listing: the latest checkpoint and the commits after it).

Example:
    >>> table = open_delta("s3://bucket/lake/episodes", None, opts, RetryConfig())
    >>> latest_versions(layout, storage, ("episodes", "steps", "video"))
    {'episodes': 41, 'steps': 41, 'video': 41}
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from pi_format import LakeLayout

from pi_loader.reading._retry import RetryConfig, classify, clean, retrying
from pi_loader.reading._storage import S3Options, S3Storage, Storage

__all__ = ["add_log_bytes", "delta_log_counts", "latest_commit_stamps", "latest_versions", "open_delta"]

_COMMIT = re.compile(r"^(\d{20})\.json$")
_CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint(\.\d+\.\d+)?\.parquet$")
# Words of delta-rs (object_store) errors that mean the store did not answer, or answered 5xx.
_TRANSIENT_DELTA = re.compile(
    r"error sending request|connect|timed? ?out|connection (refused|reset|closed)|broken pipe|"
    r"\b5\d\d\b|SlowDown|Service Unavailable|Internal Server Error|Bad Gateway|"
    r"Gateway Time|throttl|incomplete|unexpected eof|reset by peer",
    re.IGNORECASE,
)
_lock = threading.Lock()
_counts = {"delta_log_loads": 0, "delta_log_bytes": 0}


def delta_log_counts() -> dict[str, int]:
    """This process's counts of Delta log loads from the store and the bytes they read."""
    with _lock:
        return dict(_counts)


def _remote(path: str) -> bool:
    return "://" in path and not path.startswith("file://")


def _delta_options(
    storage_options: Mapping[str, str] | None, retry: RetryConfig, remote: bool
) -> dict[str, str] | None:
    options = dict(storage_options) if storage_options else {}
    if remote:
        # delta-rs (object_store) retries by itself for up to 3 minutes by default: off, so that
        # `retrying` bounds the load with one deadline and counts each retry.
        options.setdefault("max_retries", "0")
        options.setdefault("timeout", f"{retry.request_timeout_s:g}s")
        options.setdefault("connect_timeout", f"{retry.connect_timeout_s:g}s")
    return options or None


def _transient_delta(err: BaseException) -> bool:
    text = clean(str(err))
    if type(err).__name__ == "TableNotFoundError" or classify(text) != "transient":
        return False
    return bool(_TRANSIENT_DELTA.search(text))


def open_delta(
    path: str,
    version: int | None,
    storage_options: Mapping[str, str] | None,
    retry: RetryConfig | None,
) -> Any:
    """deltalake.DeltaTable(path, version) with retries of transient store errors (s3:// only).

    Raises:
        StoreUnreachableError: the store failed transiently until the deadline.
        Exception: what deltalake raises for a missing table or version (not retried).
    """
    from deltalake import DeltaTable

    remote = _remote(path)
    config = retry or RetryConfig()
    options = _delta_options(storage_options, config, remote)

    def load() -> Any:
        return DeltaTable(path, storage_options=options, version=version)

    if not remote:
        table = load()
    else:
        try:
            endpoint = S3Options.from_storage_options(storage_options).endpoint
        except (TypeError, ValueError):  # options only deltalake knows: name the table's store
            endpoint = path.split("/", 3)[2]
        table = retrying(
            load,
            what=f"loading the Delta log of {path}",
            endpoint=str(endpoint),
            config=config,
            is_transient=_transient_delta,
        )
    with _lock:
        _counts["delta_log_loads"] += 1
    return table


def add_log_bytes(count: int) -> None:
    """Count `count` bytes of Delta log read from the store (`latest_versions`' estimate)."""
    with _lock:
        _counts["delta_log_bytes"] += count


def _log_entries(storage: Storage, log_uri: str) -> list[tuple[str, int]]:
    """(name, size) of every file in the table's `_delta_log/`."""
    return [(name, size) for name, size, _ in _log_listing(storage, log_uri)]


def _log_listing(storage: Storage, log_uri: str) -> list[tuple[str, int, int]]:
    """(name, size, mtime in ns) of every file in the table's `_delta_log/`."""
    if isinstance(storage, S3Storage):
        import pyarrow.fs as pafs

        target = log_uri.split("://", 1)[1].rstrip("/")
        infos = storage.list_files(target, what=f"listing {log_uri}")
        return [
            (i.base_name, int(i.size or 0), int(i.mtime_ns or 0))
            for i in infos
            if i.type == pafs.FileType.File
        ]
    local = log_uri[len("file://") :] if log_uri.startswith("file://") else log_uri
    with os.scandir(local) as entries:
        return [(e.name, e.stat().st_size, e.stat().st_mtime_ns) for e in entries if e.is_file()]


def latest_commit_stamps(layout: LakeLayout, storage: Storage, tables: Sequence[str]) -> dict[str, int]:
    """The modification time (ns) of each table's newest commit file, or -1 for a table with no
    log: a lake deleted and written again at the same root, to the same versions, has others
    (a commit file is written once: Delta never rewrites one).

    Raises:
        StoreUnreachableError: the listing failed transiently until the retry deadline.
    """
    stamps: dict[str, int] = {}
    for name in tables:
        try:
            entries = _log_listing(storage, f"{layout.table(name).rstrip('/')}/_delta_log")
        except FileNotFoundError:
            stamps[name] = -1
            continue
        commits = [(n, mtime) for n, _, mtime in entries if _COMMIT.match(n)]
        stamps[name] = max(commits)[1] if commits else -1
    return stamps


def latest_versions(
    layout: LakeLayout, storage: Storage, tables: Sequence[str]
) -> tuple[dict[str, int], int]:
    """The newest committed version of each of `tables`, from listings of their `_delta_log/`,
    and the bytes a full load of those logs would read (the latest checkpoint and the commits
    after it).

    Raises:
        StoreUnreachableError: the listing failed transiently until the retry deadline.
        FileNotFoundError: a local table without a log.
        ValueError: a table whose log holds no commit.
    """
    versions: dict[str, int] = {}
    load_bytes = 0
    for name in tables:
        log = f"{layout.table(name).rstrip('/')}/_delta_log"
        entries = _log_entries(storage, log)
        commits = {int(m.group(1)): size for n, size in entries if (m := _COMMIT.match(n))}
        if not commits:
            raise ValueError(f"the {name} table's log {log} holds no commit")
        checkpoints = [(int(m.group(1)), size) for n, size in entries if (m := _CHECKPOINT.match(n))]
        since = max((v for v, _ in checkpoints), default=-1)
        versions[name] = max(commits)
        load_bytes += sum(size for v, size in checkpoints if v == since)
        load_bytes += sum(size for v, size in commits.items() if v > since)
    return versions, load_bytes
