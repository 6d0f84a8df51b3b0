"""pi_jobs.maintenance: keeping a lake healthy for years (issue 12, SPEC.md §7.9-7.10).

| module | command | what |
| --- | --- | --- |
| `datasets` | `pilake dataset create/list/show/delete` | dataset pins: the exact rows a named dataset reads |
| `compaction` | `pilake compact` | merge the small files streaming leaves |
| `gc` | `pilake gc` | remove superseded, deleted and uncommitted rows and unneeded files |
| `deletion` | `pilake episodes delete` | take episodes out of every new selection; GC removes their bytes |
| `annotations` | `pilake annotate import/list` | labels of step spans after the fact (SPEC.md §7.12) |

The rewrite protocol they share (file groups, commit order) is `pi_format.lake.file_groups` and
`pi_format.lake.rewrite`; pins themselves are `pi_format.lake.pins`.
"""

from pi_jobs.maintenance._lease import MaintenanceLeaseLostError, S3Lease
from pi_jobs.maintenance._lock import MaintenanceBusyError, maintenance_lock
from pi_jobs.maintenance.compaction import CompactConfig, CompactReport, compact
from pi_jobs.maintenance.datasets import (
    DatasetCheck,
    DatasetError,
    check_dataset,
    create_dataset,
    delete_dataset,
    get_dataset,
)
from pi_jobs.maintenance.deletion import DeletionReport, delete_episodes
from pi_jobs.maintenance.gc import GcConfig, GcPlan, GcReport, gc, plan_gc

__all__ = [
    "CompactConfig",
    "CompactReport",
    "DatasetCheck",
    "DatasetError",
    "DeletionReport",
    "GcConfig",
    "GcPlan",
    "GcReport",
    "MaintenanceBusyError",
    "MaintenanceLeaseLostError",
    "S3Lease",
    "check_dataset",
    "compact",
    "create_dataset",
    "delete_dataset",
    "delete_episodes",
    "gc",
    "get_dataset",
    "maintenance_lock",
    "plan_gc",
]
