"""pi_jobs.importing: outside datasets into the lake through the fleet's ingest contract
(`pilake import hdf5 | lerobot`).

Each importer reads a format into `ImportedEpisode`s (the fleet's `pi_format.Episode` plus the
annotations that come with it); `run_import` sends them with the robots' uploader to the broker,
where the stream job validates, quarantines, featurizes and commits them exactly once.

Example:
    >>> from pi_jobs.importing import ImportConfig, read_hdf5, run_import
    >>> run_import(read_hdf5(Path("lift.hdf5")), config).committed[:1]
    ['lift-3f2a9c0b1d-demo_0']
"""

from pi_jobs.importing._episodes import (
    RESIZE_POLICIES,
    DatasetImportError,
    ImportedEpisode,
    ImportOptions,
    SpanText,
    fit_frames,
    make_episode,
)
from pi_jobs.importing.driver import ImportConfig, ImportReport, run_import
from pi_jobs.importing.hdf5 import Hdf5Mapping, detect_layout, read_hdf5
from pi_jobs.importing.staging import StagedImport, stage_import

__all__ = [
    "RESIZE_POLICIES",
    "DatasetImportError",
    "Hdf5Mapping",
    "ImportConfig",
    "ImportOptions",
    "ImportReport",
    "ImportedEpisode",
    "SpanText",
    "StagedImport",
    "detect_layout",
    "fit_frames",
    "make_episode",
    "read_hdf5",
    "run_import",
    "stage_import",
]
