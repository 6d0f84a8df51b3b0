"""Plain-text rendering of query results, for `pilake sql`."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pyarrow as pa


def _cell(value: object) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.6g}"
    if isinstance(value, bytes):
        return value.hex() if len(value) <= 16 else f"<{len(value)} bytes>"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_cell(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_cell(v)}" for k, v in value.items()) + "}"
    return str(value)


def _clip(text: str, width: int) -> str:
    text = text.replace("\n", "\\n")
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"


def _is_numeric(t: pa.DataType) -> bool:
    return bool(pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t))


def format_table(table: pa.Table, *, max_rows: int = 50, max_width: int = 40) -> str:
    """Render an Arrow table as an aligned text table (numbers right-aligned, long cells cut).

    Args:
        table: the result of `Catalog.query_arrow`.
        max_rows: rows shown; a footer says how many were left out.
        max_width: characters per cell before it is cut with "…".

    Example:
        >>> print(format_table(pa.table({"robot_id": ["arm-1"], "episodes": [12]})))
        robot_id | episodes
        ---------+---------
        arm-1    |       12
        (1 row)
    """
    if not isinstance(table, pa.Table):
        raise TypeError(f"table must be a pyarrow.Table, got {type(table).__name__}")
    if max_rows < 0:
        raise ValueError(f"max_rows must be >= 0, got {max_rows}")
    if max_width < 2:
        raise ValueError(f"max_width must be >= 2, got {max_width}")
    names = table.column_names
    shown = table.slice(0, max_rows)
    columns: list[list[str]] = [
        [_clip(_cell(v), max_width) for v in shown.column(i).to_pylist()] for i in range(len(names))
    ]
    headers = [_clip(n, max_width) for n in names]
    widths = [max([len(h), *(len(c) for c in col)]) for h, col in zip(headers, columns, strict=True)]
    numeric = [_is_numeric(f.type) for f in table.schema]

    def line(cells: Sequence[str], right: Sequence[bool]) -> str:
        parts = [c.rjust(w) if r else c.ljust(w) for c, w, r in zip(cells, widths, right, strict=True)]
        return " | ".join(parts).rstrip()

    out = [line(headers, [False] * len(names)), "-+-".join("-" * w for w in widths)]
    out += [line([col[r] for col in columns], numeric) for r in range(shown.num_rows)]
    total = table.num_rows
    if total > shown.num_rows:
        out.append(f"({total} rows, {shown.num_rows} shown; raise max_rows to see more)")
    else:
        out.append(f"({total} row{'' if total == 1 else 's'})")
    return "\n".join(out)
