"""pi_catalog: the ClickHouse index of episode metadata (chdb embedded, or a ClickHouse server).

Derived from the lake's Delta `episodes` table (architecture decision 7): its visible rows (the
latest attempt of each episode, deleted episodes left out), recreated atomically by
`Catalog.rebuild`. Users query the deduplicated view `episodes` in plain ClickHouse SQL:

Example:
    >>> from pi_catalog import Catalog
    >>> Catalog("/data/catalog").episode_ids("SELECT episode_id FROM episodes WHERE success")
"""

from pi_catalog._backfills import BackfillRun, backfill_runs, record_backfill_run
from pi_catalog._catalog import Catalog
from pi_catalog._errors import CatalogLockTimeout, CatalogQueryError, PiCatalogError
from pi_catalog._format import format_table
from pi_catalog._rebuild import RebuildReport
from pi_catalog._runs import (
    LIVE_WINDOW_S,
    LiveRunReads,
    TrainingRun,
    live_run_reads,
    record_run_reads,
    record_training_run,
    training_runs,
)

__all__ = [
    "LIVE_WINDOW_S",
    "BackfillRun",
    "Catalog",
    "CatalogLockTimeout",
    "CatalogQueryError",
    "LiveRunReads",
    "PiCatalogError",
    "RebuildReport",
    "TrainingRun",
    "backfill_runs",
    "format_table",
    "live_run_reads",
    "record_backfill_run",
    "record_run_reads",
    "record_training_run",
    "training_runs",
]
