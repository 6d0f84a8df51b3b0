"""The expectation suites of the episodes and steps tables, as code.

Each expectation carries a note saying what breaks downstream when it fails; the notes render
in the Data Docs next to the result. Columns named `<column>__<what>` are derived in
`_frames.py`. great-expectations is imported only when a suite is built.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from pi_format import TABLE_SCHEMAS

from pi_jobs.ops.validation._frames import (
    STAT_COLUMNS,
    expected_episodes_columns,
    expected_steps_columns,
    list_type_name,
)

SUITE_NAMES = {"episodes": "pilake.episodes", "steps": "pilake.steps"}

# 2000-01-01 in ns: an earlier start time is a clock that was never set (epoch 0) or a unit slip.
_MIN_TIME_NS = 946_684_800 * 10**9
# 2100-01-01 in ns: later is a unit slip too (µs read as ns ... or a corrupt value).
_MAX_TIME_NS = 4_102_444_800 * 10**9


def _numpy_dtype_name(arrow_type: Any) -> str:
    return str(np.dtype(arrow_type.to_pandas_dtype()))


def _schema_expectations(gxe: Any, table: str, columns: tuple[str, ...]) -> list[Any]:
    schema = TABLE_SCHEMAS[table]
    out: list[Any] = [
        gxe.ExpectTableColumnsToMatchSet(
            column_set=list(columns),
            exact_match=True,
            notes=f"The Delta table must have the pi_format {table} schema (plus the derived `__` columns "
            "made for validation); a missing or extra column means a writer with another schema version.",
        ),
        gxe.ExpectTableRowCountToBeBetween(min_value=1, notes="An empty table validates nothing."),
    ]
    for f in schema:
        if pa_is_list(f.type):
            out.append(
                gxe.ExpectColumnValuesToBeInSet(
                    column=f"{f.name}__type",
                    value_set=[list_type_name(f.type)],
                    notes=f"List column {f.name} must have Arrow type {f.type} (readers assume it).",
                )
            )
        elif f.nullable and pa_is_integer(f.type):
            # pandas turns an integer column with nulls (rows older than the lake locator) into float64
            out.append(
                gxe.ExpectColumnValuesToBeInTypeList(
                    column=f.name,
                    type_list=[_numpy_dtype_name(f.type), "float64"],
                    notes=f"Arrow type {f.type}, nullable (float64 in pandas when it holds nulls).",
                )
            )
        else:
            out.append(
                gxe.ExpectColumnValuesToBeOfType(
                    column=f.name, type_=_numpy_dtype_name(f.type), notes=f"Arrow type {f.type}."
                )
            )
            if not f.nullable:
                out.append(gxe.ExpectColumnValuesToNotBeNull(column=f.name, notes="Declared non-null."))
    return out


def pa_is_integer(t: Any) -> bool:
    import pyarrow as pa

    return bool(pa.types.is_integer(t))


def pa_is_list(t: Any) -> bool:
    import pyarrow as pa

    return bool(pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t))


def episodes_suite() -> Any:
    """The `pilake.episodes` suite (a great_expectations.ExpectationSuite)."""
    import great_expectations as gx
    import great_expectations.expectations as gxe

    suite = gx.ExpectationSuite(
        name=SUITE_NAMES["episodes"],
        meta={"notes": "pi-lake episodes table: one row per committed episode (the commit marker)."},
    )
    exps = _schema_expectations(gxe, "episodes", expected_episodes_columns())
    exps += [
        gxe.ExpectColumnValuesToBeUnique(
            column="episode_id",
            notes="Exactly-once (decision 3): an episode is committed at most once; a repeat is a "
            "second visible copy that training would sample twice.",
        ),
        gxe.ExpectCompoundColumnsToBeUnique(
            column_list=["episode_id", "attempt_id"], notes="The visibility key of steps and video rows."
        ),
        gxe.ExpectColumnValueLengthsToBeBetween(column="episode_id", min_value=1),
        gxe.ExpectColumnValueLengthsToBeBetween(column="robot_id", min_value=1),
        gxe.ExpectColumnValueLengthsToBeBetween(column="robot_type", min_value=1),
        gxe.ExpectColumnValuesToBeBetween(
            column="step_count", min_value=1, notes="An episode without steps cannot be sampled."
        ),
        gxe.ExpectColumnValuesToBeBetween(
            column="control_rate_hz",
            min_value=0.1,
            max_value=10_000,
            notes="Rates outside [0.1, 10k] Hz are a unit slip (period given as rate, kHz as Hz).",
        ),
        gxe.ExpectColumnValuesToBeBetween(column="duration_s", min_value=0, strict_min=True),
        gxe.ExpectColumnValuesToBeBetween(
            column="duration_s__error",
            min_value=0,
            max_value=1e-6,
            notes="duration_s must equal step_count / control_rate_hz (how featurize defines it).",
        ),
        gxe.ExpectColumnValuesToBeBetween(column="proprio_dim", min_value=1, max_value=4096),
        gxe.ExpectColumnValuesToBeBetween(column="action_dim", min_value=1, max_value=4096),
        gxe.ExpectColumnValuesToBeBetween(
            column="start_time_ns", min_value=_MIN_TIME_NS, max_value=_MAX_TIME_NS
        ),
        gxe.ExpectColumnPairValuesAToBeGreaterThanB(
            column_A="committed_at_ns",
            column_B="received_at_ns",
            or_equal=True,
            notes="An episode is committed after its manifest arrived.",
        ),
        gxe.ExpectColumnValuesToBeBetween(column="raw_size_bytes", min_value=1),
        gxe.ExpectColumnValuesToBeBetween(column="video_width", min_value=2, max_value=8192),
        gxe.ExpectColumnValuesToBeBetween(column="video_height", min_value=2, max_value=8192),
        gxe.ExpectColumnValuesToBeBetween(column="video_chunk_frames", min_value=1),
        gxe.ExpectColumnPairValuesToBeEqual(
            column_A="cameras__len", column_B="camera_fps__len", notes="One frame rate per camera."
        ),
        gxe.ExpectColumnValuesToBeBetween(column="camera_fps__min", min_value=0, strict_min=True),
    ]
    for name in STAT_COLUMNS:
        dim = "proprio_dim" if name.startswith("proprio") else "action_dim"
        exps.append(
            gxe.ExpectColumnPairValuesToBeEqual(
                column_A=f"{name}__len",
                column_B=dim,
                notes=f"Per-episode statistics have one value per dimension ({dim}).",
            )
        )
    for signal in ("proprio", "action"):
        exps.append(
            gxe.ExpectColumnValuesToBeInSet(
                column=f"{signal}_stats__finite",
                value_set=[True],
                notes=f"NaN/inf in {signal} statistics means NaN/inf in the steps: it poisons training.",
            )
        )
        exps.append(
            gxe.ExpectColumnValuesToBeInSet(
                column=f"{signal}_stats__ordered",
                value_set=[True],
                notes=f"{signal}: std >= 0 and min <= mean <= max, or the statistics are corrupt.",
            )
        )
    for e in exps:
        suite.add_expectation(e)
    return suite


def steps_suite() -> Any:
    """The `pilake.steps` suite, run on the visible steps rows joined with their episode."""
    import great_expectations as gx
    import great_expectations.expectations as gxe

    suite = gx.ExpectationSuite(
        name=SUITE_NAMES["steps"],
        meta={"notes": "pi-lake steps table, visible rows only (those with a committed episodes row)."},
    )
    exps = _schema_expectations(gxe, "steps", expected_steps_columns())
    exps += [
        gxe.ExpectCompoundColumnsToBeUnique(
            column_list=["episode_id", "attempt_id", "step_index"],
            notes="A repeated step is a duplicated sample with a wrong time axis.",
        ),
        gxe.ExpectColumnValuesToBeBetween(column="step_index", min_value=0),
        gxe.ExpectColumnPairValuesToBeEqual(
            column_A="step_index",
            column_B="step_index__rank",
            notes="step_index runs 0..n-1 within an episode: no gap, no repeat.",
        ),
        gxe.ExpectColumnPairValuesToBeEqual(
            column_A="episode__step_rows",
            column_B="episode__step_count",
            notes="The episode row's step_count matches the steps actually stored.",
        ),
        gxe.ExpectColumnValuesToBeBetween(
            column="timestamp_ns__delta",
            min_value=1,
            notes="Timestamps strictly increase with step_index within an episode.",
        ),
        gxe.ExpectColumnValuesToBeBetween(
            column="timestamp_ns__delta_periods",
            min_value=0.1,
            max_value=10,
            notes="Steps are 0.1..10 control periods apart: outside that, the clock or the rate is "
            "wrong, or steps were lost.",
        ),
        gxe.ExpectColumnPairValuesToBeEqual(
            column_A="proprio__len", column_B="episode__proprio_dim", notes="proprio has proprio_dim values."
        ),
        gxe.ExpectColumnPairValuesToBeEqual(
            column_A="action__len", column_B="episode__action_dim", notes="action has action_dim values."
        ),
        gxe.ExpectColumnPairValuesToBeEqual(
            column_A="camera_frame_index__len",
            column_B="episode__cameras",
            notes="One frame index per camera of the episode.",
        ),
        gxe.ExpectColumnValuesToBeBetween(column="camera_frame_index__min", min_value=0),
        gxe.ExpectColumnValuesToBeInSet(
            column="proprio__finite", value_set=[True], notes="NaN/inf proprio poisons training."
        ),
        gxe.ExpectColumnValuesToBeInSet(
            column="action__finite", value_set=[True], notes="NaN/inf actions poison training."
        ),
    ]
    for e in exps:
        suite.add_expectation(e)
    return suite


SUITES = {"episodes": episodes_suite, "steps": steps_suite}
