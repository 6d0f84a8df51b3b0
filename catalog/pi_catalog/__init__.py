"""pi_catalog: the ClickHouse index of episode metadata (chdb embedded, or a ClickHouse server).

Derived from the lake's Delta `episodes` table (architecture decision 7). Users query the
deduplicated view `episodes` in plain ClickHouse SQL:

Example:
    >>> from pi_catalog import Catalog
    >>> Catalog("/data/catalog").episode_ids("SELECT episode_id FROM episodes WHERE success")
"""

from pi_catalog._catalog import Catalog
from pi_catalog._errors import CatalogLockTimeout, CatalogQueryError, PiCatalogError
from pi_catalog._format import format_table

__all__ = [
    "Catalog",
    "CatalogLockTimeout",
    "CatalogQueryError",
    "PiCatalogError",
    "format_table",
]
