"""Moving datasets: `pilake dataset copy` (a pin into another lake, verified, resumable,
committed last; `--flink` spreads it over a PyFlink job's subtasks) and `pilake dataset stage`
(a pin into a training host's loader cache).

Example:
    >>> from pi_jobs.datasets import copy_dataset
    >>> copy_dataset("/data/lake", "pick-v3", "s3://other-region/lake").files_sent
    412
"""

from pi_jobs.datasets._flink_copy import FlinkCopyOptions, FlinkCopyReport, copy_dataset_flink
from pi_jobs.datasets._transfer import KILL_AFTER_FILES_ENV, CopyError
from pi_jobs.datasets.copy import CopyOptions, CopyReport, copy_dataset
from pi_jobs.datasets.stage import StageOptions, stage_dataset

__all__ = [
    "KILL_AFTER_FILES_ENV",
    "CopyError",
    "CopyOptions",
    "CopyReport",
    "FlinkCopyOptions",
    "FlinkCopyReport",
    "StageOptions",
    "copy_dataset",
    "copy_dataset_flink",
    "stage_dataset",
]
