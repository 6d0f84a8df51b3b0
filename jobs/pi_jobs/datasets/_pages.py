"""The page-CRC check of a copied file: `pi_format.lake.page_walk` (moved there so that
pi_loader checks the episodes files an open reads with the same C-backed walk).

Example:
    >>> check_pages(data, require_crc=True)
    ''
"""

from __future__ import annotations

from pi_format.lake.page_walk import _fast_walk, check_pages

__all__ = ["_fast_walk", "check_pages"]
