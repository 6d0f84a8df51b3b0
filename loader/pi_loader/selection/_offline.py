"""A pinned open served by this host's `OpenCache`: at the tables' latest versions when the store
answers a listing, or the newest copy when it does not (the store is down).

Example:
    >>> entry = cached_open(layout, storage, snapshot, OpenCache(index_dir / "opens"))
"""

from __future__ import annotations

import logging

from pi_format import LakeLayout

from pi_loader.reading._delta_log import add_log_bytes, latest_versions
from pi_loader.reading._lake import READ_TABLES
from pi_loader.reading._open_cache import OpenCache, OpenEntry, count
from pi_loader.reading._retry import StoreUnreachableError
from pi_loader.reading._storage import Storage
from pi_loader.selection._snapshot import Snapshot

__all__ = ["cached_open"]

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
