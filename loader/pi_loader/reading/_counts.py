"""This process's object-store counters in one dict, for `Dataset.read_stats` (and so for
`Loader.stats()` and the loader's Prometheus metrics).

Example:
    >>> storage_counts()["storage_retries"]
    0
"""

from __future__ import annotations

from pi_loader.reading._delta_log import delta_log_counts
from pi_loader.reading._open_cache import open_cache_counts
from pi_loader.reading._ranges import range_counts
from pi_loader.reading._retry import retry_counts

__all__ = ["storage_counts"]


def storage_counts() -> dict[str, int]:
    """ "storage_retries", "storage_giveups", "storage_permanent_errors", "delta_log_loads",
    "delta_log_bytes", "open_cache_hits", "open_cache_offline_hits", and the ranged reads of an
    s3:// lake: "s3_fetched_bytes", "s3_range_requests", "s3_range_hits" (`_ranges`)."""
    return {**retry_counts(), **delta_log_counts(), **open_cache_counts(), **range_counts()}
