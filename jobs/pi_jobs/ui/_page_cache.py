"""What the operator pages keep between requests, keyed by what it was computed from.

The Quarantine, Pins and Dataset pages computed everything on every request: the open quarantine list
(the quarantine, episodes and releases tables read whole) and each pin's rows hashed again to
say "intact" (~1.1 s each at 100,000 episodes on a loaded 2-core host). Here each result is
kept under a key that changes whenever its answer could: the Delta table versions it read (a
commit makes a new version), and for a pin its file, content hash and creation time. A stale
answer is therefore never served; a new commit or pin is seen on the next request. Bounded: a
few entries each. (The raw messages of a page are found by `pi_jobs.ops._file_index`.)
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

_LOCK = threading.Lock()
# quarantine lists by (table versions, include_closed): a page, its last page and "all" ~ 4 keys
_QUARANTINE: OrderedDict[tuple[Any, ...], list[Any]] = OrderedDict()
_QUARANTINE_KEPT = 8
# pin checks by (pin name, its file, content hash, created_at_ns, episodes version)
_PIN_CHECKS: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
_PIN_CHECKS_KEPT = 4096
# a pin's Dataset page statistics by (pin name, file, content hash, created_at_ns, episodes
# version, dimension names): ~0.6 s to merge its sketches, a few kB kept
_PIN_STATS: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
_PIN_STATS_KEPT = 64
# the Dataset page's merged distributions by (sample ids, pinned keys, dimension names, episodes
# and deletions versions): the same selection samples the same ids
_DISTRIBUTIONS: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
_DISTRIBUTIONS_KEPT = 32


def table_version(uri: str) -> int | None:
    """The Delta table's latest version, None when there is no table (~10 ms: the log only)."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        return int(DeltaTable(uri).version())
    except TableNotFoundError:
        return None


def _remember(cache: OrderedDict[tuple[Any, ...], Any], key: tuple[Any, ...], value: Any, kept: int) -> None:
    with _LOCK:
        cache[key] = value
        cache.move_to_end(key)
        while len(cache) > kept:
            cache.popitem(last=False)


def quarantine_list(layout: Any, *, include_closed: bool) -> list[Any]:
    """`pi_jobs.ops.quarantine.list_quarantine`, kept per versions of the three tables it reads.

    The versions are read before the list: the list is at least as new as its key, so a commit
    between the two makes the next request read again, never serves an older list.
    """
    from pi_jobs.ops.quarantine import list_quarantine

    key = (
        layout.root,
        table_version(layout.quarantine),
        table_version(layout.episodes),
        table_version(layout.quarantine_releases),
        include_closed,
    )
    with _LOCK:
        kept = _QUARANTINE.get(key)
    if kept is not None:
        return kept
    entries = list_quarantine(layout, include_closed=include_closed)
    _remember(_QUARANTINE, key, entries, _QUARANTINE_KEPT)
    return entries


def pin_check(key: tuple[Any, ...]) -> Any:
    """A kept pin check (None when there is none for `key`)."""
    with _LOCK:
        return _PIN_CHECKS.get(key)


def keep_pin_check(key: tuple[Any, ...], check: Any) -> None:
    _remember(_PIN_CHECKS, key, check, _PIN_CHECKS_KEPT)


def pin_stats(layout: Any, name: str, names: Any, compute: Callable[[], Any]) -> Any:
    """`compute()` (the Dataset page's statistics of pin `name`), kept while neither the pin nor
    the episodes table changed; the version is read first, so a kept result is never older than
    its key. A name that is no pin goes to `compute()`, whose error says so."""
    from pi_format.lake import PinStore

    version = table_version(layout.episodes)
    summary = next((s for s in PinStore(layout).summaries() if s.name == name), None)
    if summary is None:
        return compute()
    key = (layout.root, name, summary.path, summary.content_hash, summary.created_at_ns, version, id(names))
    with _LOCK:
        kept = _PIN_STATS.get(key)
    if kept is None:
        kept = compute()
        _remember(_PIN_STATS, key, kept, _PIN_STATS_KEPT)
    return kept


def _digest(values: Any) -> str:
    """A sha256 of an Arrow string array's values in sorted order (None: "-"): a catalog query
    without ORDER BY returns the same sample in another order."""
    import hashlib

    if values is None:
        return "-"
    digest = hashlib.sha256()
    for value in sorted(str(v) for v in values.to_pylist()):
        digest.update(str(value).encode() + b"\x00")
    return digest.hexdigest()


def distributions(layout: Any, of: tuple[Any, Any, int], compute: Callable[[], Any]) -> Any:
    """`compute()` (the distributions merged from the sketches of sample `of[0]`, of the pinned
    keys `of[1]` or the visible attempts, with dimension names `of[2]`), kept while the episodes
    and deletions tables hold the versions read before it."""
    sample, pinned, names = of
    key = (
        layout.root,
        table_version(layout.episodes),
        table_version(layout.deletions),
        _digest(sample),
        _digest(pinned),
        names,
    )
    with _LOCK:
        kept = _DISTRIBUTIONS.get(key)
    if kept is None:
        kept = compute()
        _remember(_DISTRIBUTIONS, key, kept, _DISTRIBUTIONS_KEPT)
    return kept


def clear() -> None:
    """Forget everything (tests)."""
    with _LOCK:
        _QUARANTINE.clear()
        _PIN_CHECKS.clear()
        _PIN_STATS.clear()
        _DISTRIBUTIONS.clear()
