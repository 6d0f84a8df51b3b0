"""Batch validation of lake tables (great-expectations suites, Data Docs) and drift checks.

great-expectations is imported only when a suite runs (its import takes seconds); the drift
check needs only numpy.

Example:
    >>> from pi_jobs.ops.validation import validate_table
    >>> report = validate_table("/data/lake", "episodes", validation_dir=Path("/data/validation"))
    >>> report.success
    True
"""

from pi_jobs.ops.validation._drift import (
    DriftConfig,
    DriftFinding,
    DriftGroup,
    DriftReport,
    check_lake_drift,
    drift_check,
    write_drift_report,
)
from pi_jobs.ops.validation._errors import ValidationSetupError
from pi_jobs.ops.validation._frames import ValidationFrame, episodes_frame, steps_frame
from pi_jobs.ops.validation._runner import (
    VALIDATED_TABLES,
    ExpectationOutcome,
    ValidationReport,
    load_frame,
    run_suite,
    validate_table,
)

__all__ = [
    "VALIDATED_TABLES",
    "DriftConfig",
    "DriftFinding",
    "DriftGroup",
    "DriftReport",
    "ExpectationOutcome",
    "ValidationFrame",
    "ValidationReport",
    "ValidationSetupError",
    "check_lake_drift",
    "drift_check",
    "episodes_frame",
    "load_frame",
    "run_suite",
    "steps_frame",
    "validate_table",
    "write_drift_report",
]
