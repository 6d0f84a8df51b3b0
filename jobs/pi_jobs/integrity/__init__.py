"""Integrity of the lake's stored bytes (architecture decision 10): `pilake verify`, a scrub
that checks every stored byte against its checksum (Parquet page CRCs, video `chunk_crc32`, raw
wire CRCs, the Delta logs' file sizes) and names the damaged episodes, and `pilake repair`,
which re-featurizes them from `raw` through the backfill's rebuild or keeps them aside.

| module | owns |
| --- | --- |
| `verify` | `VerifyConfig`, `VerifyReport`, `verify_lake`: the scrub, its state and report |
| `repair` | `RepairConfig`, `RepairReport`, `repair_lake` |
| `_scan` | the checks of one file (page CRCs, decoded pages and row groups, chunk and wire CRCs) |
| `_lost` | beyond the bytes: gaps in a Delta log, episodes whose rows are there and marker is not |
| `_attribute` | the markers the lake can vouch for, and which episodes each fault holds |
| `_relog` | repair's part for a log whose head does not load and marker files nobody can read |

Example:
    >>> report = verify_lake(LakeLayout("/data/lake"), VerifyConfig(sample=0.1))
    >>> if report.exit_code:
    ...     repair_lake(LakeLayout("/data/lake"), report, RepairConfig(catalog_path="/data/catalog"))
"""

from pi_jobs.integrity._scan import Fault, FileResult
from pi_jobs.integrity.repair import RepairConfig, RepairReport, repair_lake
from pi_jobs.integrity.verify import VERIFIED_TABLES, VerifyConfig, VerifyReport, verify_lake

__all__ = [
    "VERIFIED_TABLES",
    "Fault",
    "FileResult",
    "RepairConfig",
    "RepairReport",
    "VerifyConfig",
    "VerifyReport",
    "repair_lake",
    "verify_lake",
]
