"""Delta table version -> the pandas frame the expectation suites run on.

great-expectations checks one value or one pair of columns at a time, so what a row-level rule
needs from several rows or from list cells is derived here first, as extra columns named
`<column>__<what>` (list lengths, all-finite flags, per-episode step ranks and timestamp deltas).
List columns themselves are replaced by these derived columns: turning millions of list cells
into Python objects would cost more than the whole validation. Pure pyarrow/numpy, no GX.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pi_format import TABLE_SCHEMAS
from pi_format.lake import latest_commits, visible_rows

STAT_COLUMNS = tuple(
    f"{sig}_{stat}" for sig in ("proprio", "action") for stat in ("mean", "std", "min", "max")
)


@dataclass(frozen=True, slots=True, eq=False)
class ValidationFrame:
    """A table version prepared for the suites: scalar columns plus derived `__` columns."""

    table: str
    version: int
    frame: Any  # pandas.DataFrame (pandas ships no type stubs here)
    skipped_rows: int  # rows not validated: steps of attempts that never committed (invisible)
    expected_columns: tuple[str, ...]  # what the frame has when the table has the pi_format schema


def _pandas() -> Any:
    # pandas has no type stubs in this environment; imported here as Any, and only when needed
    return importlib.import_module("pandas")


def _is_list(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)


def _lengths(column: pa.ChunkedArray) -> np.ndarray:
    return np.asarray(pc.list_value_length(column).to_numpy(zero_copy_only=False), dtype=np.int64)


def _row_all_finite(column: pa.ChunkedArray) -> np.ndarray:
    """Per row: every element of the list cell is finite (an empty cell counts as finite)."""
    combined = column.combine_chunks()
    values = np.asarray(pc.list_flatten(combined).to_numpy(zero_copy_only=False), dtype=np.float64)
    parents = np.asarray(pc.list_parent_indices(combined).to_numpy(zero_copy_only=False), dtype=np.int64)
    bad = np.bincount(parents[~np.isfinite(values)], minlength=len(combined))
    return bad == 0


def _row_min(column: pa.ChunkedArray) -> np.ndarray:
    """Per row: the smallest element (NaN for an empty cell, which the expectations skip)."""
    combined = column.combine_chunks()
    values = np.asarray(pc.list_flatten(combined).to_numpy(zero_copy_only=False), dtype=np.float64)
    parents = np.asarray(pc.list_parent_indices(combined).to_numpy(zero_copy_only=False), dtype=np.int64)
    out = np.full(len(combined), np.inf)
    np.minimum.at(out, parents, values)
    out[~np.isfinite(out) & (out > 0)] = np.nan
    return out


def _stats_ordered(table: pa.Table, signal: str) -> np.ndarray:
    """Per episode: std >= 0 and min <= mean <= max in every dim (NaN-free stats assumed;
    rows whose four stat lists differ in length are left to the length expectations: True)."""
    cols = {s: table.column(f"{signal}_{s}").to_pylist() for s in ("mean", "std", "min", "max")}
    out = np.ones(table.num_rows, dtype=bool)
    for i in range(table.num_rows):
        mean, std, low, high = (
            np.asarray(cols[s][i], dtype=np.float64) for s in ("mean", "std", "min", "max")
        )
        if not (len(mean) == len(std) == len(low) == len(high)):
            continue
        # a float32 mean of float32 values can sit a rounding step outside [min, max]
        slack = 1e-5 * np.maximum(np.abs(low), np.abs(high)) + 1e-6
        out[i] = bool(np.all(std >= 0) and np.all(low <= mean + slack) and np.all(mean <= high + slack))
    return out


def _scalar_frame(table: pa.Table) -> dict[str, object]:
    return {f.name: table.column(f.name).to_pandas() for f in table.schema if not _is_list(f.type)}


def _list_type_columns(table: pa.Table) -> dict[str, object]:
    """`<col>__type`: the Arrow type of each list column (constant, so a schema drift is one
    failing expectation that names the column and the type found)."""
    return {
        f"{f.name}__type": [list_type_name(f.type)] * table.num_rows for f in table.schema if _is_list(f.type)
    }


def list_type_name(t: pa.DataType) -> str:
    """`list<float>` for any list type of float32: Delta renames the element field `item` to
    `element` and turns fixed-size lists into plain ones, which readers do not care about."""
    return f"list<{t.value_type}>"


def episodes_frame(table: pa.Table, version: int) -> ValidationFrame:
    """Derived columns of the episodes table (see the module docstring)."""
    pd = _pandas()

    data = _scalar_frame(table)
    data.update(_list_type_columns(table))
    names = set(table.column_names)
    for name in STAT_COLUMNS:
        if name in names:
            data[f"{name}__len"] = _lengths(table.column(name))
    for signal in ("proprio", "action"):
        stat_names = [f"{signal}_{s}" for s in ("mean", "std", "min", "max")]
        if all(n in names for n in stat_names):
            finite = np.ones(table.num_rows, dtype=bool)
            for n in stat_names:
                finite &= _row_all_finite(table.column(n))
            data[f"{signal}_stats__finite"] = finite
            data[f"{signal}_stats__ordered"] = _stats_ordered(table, signal)
    for name in ("cameras", "camera_fps"):
        if name in names:
            data[f"{name}__len"] = _lengths(table.column(name))
    if "camera_fps" in names:
        data["camera_fps__min"] = _row_min(table.column("camera_fps"))
    if {"duration_s", "step_count", "control_rate_hz"} <= names:
        rate = table.column("control_rate_hz").to_numpy().astype(np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            expected = table.column("step_count").to_numpy().astype(np.float64) / rate
        data["duration_s__error"] = np.abs(table.column("duration_s").to_numpy() - expected)
    frame = pd.DataFrame(data)
    return ValidationFrame("episodes", version, frame, 0, expected_episodes_columns())


def expected_episodes_columns() -> tuple[str, ...]:
    schema = TABLE_SCHEMAS["episodes"]
    cols = [f.name for f in schema if not _is_list(f.type)]
    cols += [f"{f.name}__type" for f in schema if _is_list(f.type)]
    cols += [f"{n}__len" for n in STAT_COLUMNS]
    cols += [f"{s}_stats__{w}" for s in ("proprio", "action") for w in ("finite", "ordered")]
    cols += ["cameras__len", "camera_fps__len", "camera_fps__min", "duration_s__error"]
    return tuple(cols)


_EPISODE_JOIN = ("proprio_dim", "action_dim", "step_count", "control_rate_hz")


def steps_frame(steps: pa.Table, episodes: pa.Table, version: int) -> ValidationFrame:
    """Derived columns of the visible steps rows (those with a committed episodes row).

    `episodes` supplies the declared dims, step count and rate of each (episode_id, attempt_id),
    joined in as `episode__<column>`.
    """
    pd = _pandas()

    ep_cols = ["episode_id", "attempt_id", *_EPISODE_JOIN]
    ep = episodes.select([c for c in ep_cols if c in episodes.column_names])
    if "cameras" in episodes.column_names:
        ep = ep.append_column("cameras_len", pc.list_value_length(episodes.column("cameras")))
    ep = ep.rename_columns(
        [
            c if c in ("episode_id", "attempt_id") else f"episode__{c.removesuffix('_len')}"
            for c in ep.column_names
        ]
    )
    total = steps.num_rows
    # Only visible rows are validated (the lake's visibility rule, pi_format.lake); rows of
    # attempts that never committed are GC's business and counted as skipped.
    visible = visible_rows(steps, latest_commits(episodes))
    skipped = total - visible.num_rows
    # Arrow joins refuse list columns outside the keys: join the keys with row numbers, then take.
    keys = visible.select(["episode_id", "attempt_id"]).append_column(
        "__row", pa.array(np.arange(visible.num_rows, dtype=np.int64))
    )
    matched = keys.join(ep, keys=["episode_id", "attempt_id"], join_type="left outer").sort_by("__row")
    joined = visible.take(matched.column("__row"))
    for name in matched.column_names:
        if name.startswith("episode__"):
            joined = joined.append_column(name, matched.column(name))
    if joined.num_rows:
        joined = joined.sort_by(
            [("episode_id", "ascending"), ("attempt_id", "ascending"), ("step_index", "ascending")]
        )
    data = _scalar_frame(joined)
    data.update(_list_type_columns(joined))
    names = set(joined.column_names)
    for name in ("proprio", "action", "camera_frame_index"):
        if name in names:
            data[f"{name}__len"] = _lengths(joined.column(name))
    for name in ("proprio", "action"):
        if name in names:
            data[f"{name}__finite"] = _row_all_finite(joined.column(name))
    if "camera_frame_index" in names:
        data["camera_frame_index__min"] = _row_min(joined.column("camera_frame_index"))
    frame = pd.DataFrame(data)
    if len(frame) and {"step_index", "timestamp_ns"} <= names:
        group = frame.groupby(["episode_id", "attempt_id"], sort=False)
        frame["step_index__rank"] = group.cumcount().astype(np.int64)
        frame["episode__step_rows"] = group["step_index"].transform("size").astype(np.int64)
        # float64 holds ns deltas exactly up to ~104 days; NaN (skipped) for each episode's first step
        delta = group["timestamp_ns"].diff()
        frame["timestamp_ns__delta"] = delta
        frame["timestamp_ns__delta_periods"] = delta * frame["episode__control_rate_hz"] / 1e9
    else:
        for col in (
            "step_index__rank",
            "episode__step_rows",
            "timestamp_ns__delta",
            "timestamp_ns__delta_periods",
        ):
            frame[col] = pd.Series(dtype="float64")
    return ValidationFrame("steps", version, frame, skipped, expected_steps_columns())


def expected_steps_columns() -> tuple[str, ...]:
    schema = TABLE_SCHEMAS["steps"]
    cols = [f.name for f in schema if not _is_list(f.type)]
    cols += [f"{f.name}__type" for f in schema if _is_list(f.type)]
    cols += [f"episode__{c}" for c in (*_EPISODE_JOIN, "cameras")]
    cols += ["proprio__len", "action__len", "camera_frame_index__len", "proprio__finite", "action__finite"]
    cols += ["camera_frame_index__min", "step_index__rank", "episode__step_rows"]
    cols += ["timestamp_ns__delta", "timestamp_ns__delta_periods"]
    return tuple(cols)
