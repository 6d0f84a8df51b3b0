"""Run a suite on one version of a Delta table with great-expectations and render Data Docs.

The GX project lives in `<validation_dir>/gx` (a file context), so the Data Docs index keeps the
history of every validation run, one page per (table, version, run time).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pi_format import LakeLayout

from pi_jobs.ops.validation._errors import ValidationSetupError
from pi_jobs.ops.validation._frames import ValidationFrame, episodes_frame, steps_frame
from pi_jobs.ops.validation._suites import SUITE_NAMES, SUITES

log = logging.getLogger("pi_jobs")

VALIDATED_TABLES = tuple(SUITE_NAMES)


@dataclass(frozen=True, slots=True)
class ExpectationOutcome:
    """The result of one expectation of a suite."""

    expectation: str  # the GX expectation type, e.g. "expect_column_values_to_be_between"
    column: str | None  # the column (or "A,B" for a pair / compound), None for table-level
    success: bool
    unexpected_count: int | None
    detail: str  # a short human summary: observed value or a few unexpected values

    def describe(self) -> str:
        where = f" on {self.column}" if self.column else ""
        return f"{'ok  ' if self.success else 'FAIL'} {self.expectation}{where}: {self.detail}"


@dataclass(frozen=True, slots=True)
class ValidationReport:
    """What `validate_table` found.

    Example:
        >>> report = validate_table("/data/lake", "episodes", validation_dir=Path("/data/validation"))
        >>> report.success, report.docs_index
        (True, PosixPath('/data/validation/gx/uncommitted/data_docs/local_site/index.html'))
    """

    table: str
    version: int
    suite_name: str
    rows: int
    skipped_rows: int  # invisible rows (attempts that never committed), not validated
    outcomes: tuple[ExpectationOutcome, ...]
    docs_index: Path | None

    @property
    def success(self) -> bool:
        return all(o.success for o in self.outcomes)

    @property
    def failed(self) -> tuple[ExpectationOutcome, ...]:
        return tuple(o for o in self.outcomes if not o.success)


def read_version(path: str, version: int | None) -> tuple[Any, int]:
    """(pyarrow Table, version) of a Delta table at `version` (latest when None)."""
    from deltalake import DeltaTable

    try:
        dt = DeltaTable(path) if version is None else DeltaTable(path, version=version)
    except Exception as err:  # deltalake raises TableNotFoundError and friends
        what = "latest version" if version is None else f"version {version}"
        raise ValidationSetupError(
            f"cannot open the Delta table {path} at {what}: {err}; check the lake root (PILAKE_LAKE) "
            "and the version (pilake validate TABLE --version V, V from the table's history)"
        ) from err
    return dt.to_pyarrow_table(), int(dt.version())


def load_frame(lake_root: str, table: str, version: int | None = None) -> ValidationFrame:
    """Read `table` at `version` and derive the columns its suite checks.

    Steps are joined with the latest episodes table (only visible rows are validated).
    """
    if table not in SUITES:
        raise ValidationSetupError(
            f"no expectation suite for table {table!r}; suites exist for {sorted(SUITES)}"
        )
    layout = LakeLayout(lake_root)
    rows, v = read_version(layout.table(table), version)
    if table == "episodes":
        return episodes_frame(rows, v)
    episodes, _ = read_version(layout.episodes, None)
    return steps_frame(rows, episodes, v)


def _detail(result: Any) -> str:
    r = dict(result.result or {})
    if "observed_value" in r:
        text = str(r["observed_value"])
        return f"observed {text[:200]}"
    if "unexpected_count" in r:
        values = r.get("partial_unexpected_list") or []
        shown = ", ".join(repr(v) for v in values[:5])
        return f"{r['unexpected_count']} of {r.get('element_count')} rows unexpected" + (
            f" (e.g. {shown})" if shown else ""
        )
    if result.exception_info and result.exception_info.get("raised_exception"):
        return f"error: {str(result.exception_info.get('exception_message'))[:200]}"
    return "no detail"


def _outcome(result: Any) -> ExpectationOutcome:
    cfg = result.expectation_config
    kwargs = cfg.kwargs
    column = kwargs.get("column")
    if column is None and "column_A" in kwargs:
        column = f"{kwargs['column_A']},{kwargs['column_B']}"
    if column is None and "column_list" in kwargs:
        column = ",".join(kwargs["column_list"])
    unexpected = (result.result or {}).get("unexpected_count")
    return ExpectationOutcome(
        expectation=str(cfg.type),
        column=column,
        success=bool(result.success),
        unexpected_count=None if unexpected is None else int(unexpected),
        detail=_detail(result),
    )


def run_suite(prepared: ValidationFrame, validation_dir: Path, *, docs: bool = True) -> ValidationReport:
    """Validate a prepared frame with its suite; render Data Docs under `validation_dir`."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    gx_log = logging.getLogger("great_expectations")
    if gx_log.level == logging.NOTSET:
        # GX logs hundreds of INFO lines per run (decorator registration, config saves)
        gx_log.setLevel(logging.WARNING)
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    validation_dir.mkdir(parents=True, exist_ok=True)
    context = gx.get_context(mode="file", project_root_dir=str(validation_dir))
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    name = SUITE_NAMES[prepared.table]
    source = context.data_sources.add_or_update_pandas("pilake")
    try:
        asset = source.get_asset(prepared.table)
    except LookupError:
        asset = source.add_dataframe_asset(prepared.table)
    try:
        batch = asset.get_batch_definition("whole-version")
    except KeyError:
        batch = asset.add_batch_definition_whole_dataframe("whole-version")
    # The suite in code is the source of truth: overwrite what an older pi-lake stored.
    suite = context.suites.add_or_update(SUITES[prepared.table]())
    definition = context.validation_definitions.add_or_update(
        gx.ValidationDefinition(name=name, data=batch, suite=suite)
    )
    actions: list[Any] = [gx.checkpoint.UpdateDataDocsAction(name="data-docs")] if docs else []
    checkpoint = context.checkpoints.add_or_update(
        gx.Checkpoint(
            name=name, validation_definitions=[definition], actions=actions, result_format="SUMMARY"
        )
    )
    run_name = f"{prepared.table}@v{prepared.version}"
    log.info("validate: %s, %d rows, suite %s", run_name, len(prepared.frame), name)
    result = checkpoint.run(
        batch_parameters={"dataframe": prepared.frame}, run_id=gx.RunIdentifier(run_name=run_name)
    )
    outcomes = tuple(_outcome(r) for run in result.run_results.values() for r in run.results)
    index: Path | None = None
    if docs:
        for site in context.get_docs_sites_urls():
            url = str(site.get("site_url") or "")
            if url.startswith("file://"):
                index = Path(url.removeprefix("file://"))
    return ValidationReport(
        table=prepared.table,
        version=prepared.version,
        suite_name=name,
        rows=len(prepared.frame),
        skipped_rows=prepared.skipped_rows,
        outcomes=outcomes,
        docs_index=index,
    )


def validate_table(
    lake_root: str, table: str, *, validation_dir: Path, version: int | None = None, docs: bool = True
) -> ValidationReport:
    """Validate one version of a lake table with its expectation suite.

    Args:
        lake_root: the lake's root directory (Settings.lake_root).
        table: "episodes" or "steps".
        validation_dir: where the GX project and its Data Docs live (Settings.validation_dir).
        version: the Delta version; latest when None.
        docs: render the Data Docs (HTML).

    Raises:
        ValidationSetupError: no suite for the table, or the table/version cannot be read.

    Example:
        >>> report = validate_table("/data/lake", "steps", validation_dir=Path("/data/validation"))
        >>> [o.describe() for o in report.failed]
        []
    """
    return run_suite(load_frame(lake_root, table, version), validation_dir, docs=docs)
