"""A small least-recently-used map bounded by a total weight (a count, or bytes).

The loader's per-process caches (parsed Parquet footers, episodes' steps arrays, decoded video
chunks) are all this map, so what a worker holds is set by the cache configuration and never by
the size of the dataset (architecture decision 8). Not thread-safe: callers hold their own lock.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class WeightedLRU(Generic[K, V]):
    """Keeps the most recently used entries whose weights sum to at most `capacity` (and, with
    `max_items`, at most that many entries).

    An entry heavier than the whole capacity is not kept (caching it would evict everything and
    still break the bound); the caller simply uses it once.

    Example:
        >>> lru: WeightedLRU[str, bytes] = WeightedLRU(capacity=10)
        >>> lru.put("a", b"1234", weight=4); lru.put("b", b"12345678", weight=8)
        >>> lru.get("a") is None, len(lru)   # "a" was evicted to make room for "b"
        (True, 1)
    """

    def __init__(self, capacity: int, max_items: int | None = None) -> None:
        for name, value in (("capacity", capacity), ("max_items", max_items)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        self.capacity = capacity
        self.max_items = max_items
        self.weight = 0
        self._items: OrderedDict[K, tuple[V, int]] = OrderedDict()

    def get(self, key: K) -> V | None:
        item = self._items.get(key)
        if item is None:
            return None
        self._items.move_to_end(key)
        return item[0]

    def put(self, key: K, value: V, weight: int = 1) -> None:
        old = self._items.pop(key, None)
        if old is not None:
            self.weight -= old[1]
        if weight > self.capacity:
            return
        self._items[key] = (value, weight)
        self.weight += weight
        while self.weight > self.capacity or (
            self.max_items is not None and len(self._items) > self.max_items
        ):
            _, (_, dropped) = self._items.popitem(last=False)
            self.weight -= dropped

    def __len__(self) -> int:
        return len(self._items)
