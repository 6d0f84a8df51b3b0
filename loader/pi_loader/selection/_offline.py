"""A pinned open served by this host's `OpenCache`: at the tables' latest versions when the store
answers a listing, or the newest copy when it does not (the store is down). An unpinned open
(SQL, ids, or the whole lake at its latest versions) is served from it too when the tables'
latest versions (and the deletions table's) are those it was saved at: no Delta log is loaded
and no episodes row is read (`latest_open_key`, `cached_latest_open`).

Example:
    >>> entry = cached_open(layout, storage, snapshot, OpenCache(index_dir / "opens"))
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence

from pi_format import LakeLayout

from pi_loader.reading._delta_log import add_log_bytes, latest_commit_stamps, latest_versions
from pi_loader.reading._lake import READ_TABLES
from pi_loader.reading._open_cache import OpenCache, OpenEntry, count
from pi_loader.reading._retry import StoreUnreachableError
from pi_loader.reading._storage import Storage
from pi_loader.selection._snapshot import Snapshot

__all__ = ["cached_latest_open", "cached_open", "latest_open_key"]

_log = logging.getLogger("pi_loader")


def cached_open(layout: LakeLayout, storage: Storage, pinned: Snapshot, opens: OpenCache) -> OpenEntry | None:
    """The cached rows of `pinned`'s open at the lake's latest table versions, or None (a miss:
    open from the store and save). A store that stays unreachable past the retry deadline is
    answered from the newest cached copy; without one, the StoreUnreachableError says so."""
    fingerprint = pinned.fingerprint
    try:
        versions, log_bytes = latest_versions(layout, storage, READ_TABLES)
    except StoreUnreachableError as err:
        entry = opens.newest(fingerprint)
        if entry is None:
            raise StoreUnreachableError(
                f"cannot open the snapshot {fingerprint} of {layout.root}: {err}. This host has no "
                f"cached open of it ({opens.directory}): a snapshot opened once with the store up "
                "opens from the cache while the store is down"
            ) from None
        count("open_cache_offline_hits")
        _log.warning(
            "the object store is unreachable (%s); opening snapshot %s from this host's cache at "
            "table versions %s",
            err,
            fingerprint,
            entry.versions,
        )
        return entry
    except (OSError, ValueError):
        return None  # no log to list (a lake not made yet?): the full open says what is wrong
    entry = opens.load(fingerprint, versions)
    if entry is not None:
        count("open_cache_hits")
    else:
        add_log_bytes(log_bytes)  # what the full open is about to load
    return entry


def latest_open_key(
    layout: LakeLayout, storage: Storage, ids: Sequence[str] | None
) -> tuple[str, dict[str, int], int] | None:
    """(fingerprint, versions of READ_TABLES, bytes a full log load would read) of an unpinned
    open of `ids` (None: every visible episode) at the lake's latest versions, from listings of
    the tables' `_delta_log/` (no log bytes); None when the logs cannot be listed (the full
    open then says why). The fingerprint covers the selection and the deletions table's version
    (deleting an episode changes what an unpinned open sees)."""
    try:
        versions, log_bytes = latest_versions(layout, storage, READ_TABLES)
    except StoreUnreachableError as err:  # as the full open would say it, without a second wait
        raise StoreUnreachableError(f"cannot open the episodes table at {layout.episodes}: {err}") from None
    except (OSError, ValueError):
        return None
    try:
        deletions = latest_versions(layout, storage, ("deletions",))[0]["deletions"]
    except (FileNotFoundError, ValueError):
        deletions = -1  # a lake older than deletions: none
    except OSError:
        return None
    try:  # a lake written again at the same root, to the same versions, is another lake
        stamps = latest_commit_stamps(layout, storage, (*READ_TABLES, "deletions"))
    except OSError:
        return None
    digest = hashlib.sha256(f"unpinned\n{deletions}\n{sorted(stamps.items())}\n".encode())
    digest.update(b"*" if ids is None else "\x1f".join(sorted(ids)).encode())
    return digest.hexdigest()[:40], versions, log_bytes


def cached_latest_open(opens: OpenCache, key: tuple[str, dict[str, int], int]) -> OpenEntry | None:
    """The cached rows of an unpinned open with `key` (`latest_open_key`), or None (counted as
    the log bytes the full open is about to load)."""
    fingerprint, versions, log_bytes = key
    entry = opens.load(fingerprint, versions)
    if entry is not None:
        count("open_cache_hits")
    else:
        add_log_bytes(log_bytes)
    return entry
