"""The Query page's SQL: one SELECT over the catalog's tables, screened, then run read-only and
bounded on a reader of its own.

Three locks, each of which must hold: the text check here refuses anything but one SELECT/WITH
statement without SETTINGS or INTO OUTFILE; the screen (pi_jobs.ui._screen) refuses, on the
engine's own parse of the query, every function, table function and table that is not
classified safe (files, network, dictionaries, the server's state, system tables); and the
statement runs on an isolated reader (pi_catalog `Catalog.isolated_reader`) whose settings
(`query_settings`: time, memory, result and thread limits, then readonly = 1) the query cannot
change. The user's query runs as a subquery, `SELECT * FROM (<query>) LIMIT n OFFSET m`, which
parses only for a SELECT.
"""

from __future__ import annotations

import itertools
import re
import shlex
import time
from dataclasses import dataclass
from typing import Any

from pi_jobs.ui._errors import QueryRefused
from pi_jobs.ui._screen import EngineFunctions, screen_ast

_FIRST_WORDS = ("SELECT", "WITH")
_WORD = re.compile(r"[A-Za-z_][A-Za-z_0-9]*")
# Most characters of a cell shown in the table (the full value stays in the catalog).
_CELL_CHARS = 200


def _code_only(sql: str) -> str:
    """`sql` with comments blanked and string literals and quoted identifiers filled with `0`
    (same length), so the checks below look at keywords and punctuation only, and a query that
    ends in a literal keeps it (filling with blanks cut it off as trailing space); QueryRefused
    for an unclosed one."""
    out: list[str] = []
    i, n = 0, len(sql)
    while i < n:
        c = sql[i]
        if c in "'\"`":
            j = i + 1
            while j < n:
                if sql[j] == "\\":
                    j += 2
                    continue
                if sql[j] == c:
                    if j + 1 < n and sql[j + 1] == c:  # '' inside a literal
                        j += 2
                        continue
                    break
                j += 1
            if j >= n:
                raise QueryRefused(f"the query has an unclosed {c} quote (from position {i})")
            out.append("0" * (j + 1 - i))
            i = j + 1
        elif sql.startswith("--", i) or c == "#":
            j = sql.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif sql.startswith("/*", i):
            j = sql.find("*/", i + 2)
            if j < 0:
                raise QueryRefused(f"the query has an unclosed /* comment (from position {i})")
            out.append(" " * (j + 2 - i))
            i = j + 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def check_select(sql: str) -> str:
    """The query, trailing semicolons removed, if it is one SELECT (or WITH ... SELECT) that
    changes no setting; QueryRefused saying why otherwise.

    Raises:
        QueryRefused: empty, several statements, not a SELECT, a SETTINGS clause, INTO OUTFILE,
            unbalanced parentheses or an unclosed quote/comment.

    Example:
        >>> check_select("SELECT episode_id FROM episodes WHERE success;")
        'SELECT episode_id FROM episodes WHERE success'
    """
    if not isinstance(sql, str) or not sql.strip():
        raise QueryRefused("the query is empty; write a SELECT over the catalog's `episodes` view")
    code = _code_only(sql)
    stripped = code.rstrip().rstrip(";").rstrip()
    if ";" in stripped:
        raise QueryRefused("the query holds several statements (a `;` before its end); run one SELECT")
    words = [w.upper() for w in _WORD.findall(stripped)]
    if not words or words[0] not in _FIRST_WORDS:
        first = words[0] if words else stripped.strip()[:20]
        raise QueryRefused(f"only SELECT queries run here (read-only), got a query starting with {first!r}")
    if "SETTINGS" in words:
        raise QueryRefused(
            "the query has a SETTINGS clause; the UI runs queries with its own read-only settings "
            "and a time limit, which a query may not change"
        )
    if any(a == "INTO" and b == "OUTFILE" for a, b in itertools.pairwise(words)):
        raise QueryRefused("INTO OUTFILE writes a file; the UI only reads")
    depth = 0
    for c in stripped:
        depth += (c == "(") - (c == ")")
        if depth < 0:
            raise QueryRefused("the query closes a parenthesis it never opened")
    if depth:
        raise QueryRefused(f"the query leaves {depth} parenthesis(es) open")
    # cut at the end of the code: trailing `;` and comments go, the statement stays verbatim
    return sql[: len(stripped)].strip()


def wrap_select(sql: str, *, limit: int, offset: int) -> str:
    """The statement ClickHouse runs for a checked query: one page of it.

    The query sits on lines of its own, so a trailing `--` comment cannot swallow the wrapper.
    Its settings (read-only, limits) are the reader's, not the statement's (`query_settings`).

    Example:
        >>> wrap_select("SELECT 1", limit=51, offset=0).splitlines()[-1]
        ') LIMIT 51 OFFSET 0'
    """
    if limit < 0 or offset < 0:
        raise ValueError(f"limit and offset must be >= 0, got {limit} and {offset}")
    return f"SELECT * FROM (\n{sql}\n) LIMIT {int(limit)} OFFSET {int(offset)}"


def _count_sql(sql: str, cap: int) -> str:
    return f"SELECT count() AS n FROM (SELECT 1 FROM (\n{sql}\n) LIMIT {int(cap) + 1})"


@dataclass(frozen=True, slots=True)
class QueryResult:
    """One page of a query's rows, as strings to show, and what the page needs around them."""

    sql: str
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    page: int
    page_size: int
    total_rows: int  # counted up to row_cap + 1 (then `capped`)
    row_cap: int
    capped: bool
    elapsed_ms: float

    @property
    def episode_column(self) -> int | None:
        """Index of the `episode_id` column (its cells link to the Episode page), or None."""
        return self.columns.index("episode_id") if "episode_id" in self.columns else None

    @property
    def has_next(self) -> bool:
        return (self.page + 1) * self.page_size < min(self.total_rows, self.row_cap)

    def pin_command(self, name: str = "my-dataset") -> str | None:
        """The `pilake dataset create` command that pins this selection (None without an
        `episode_id` column, which a pin needs)."""
        if self.episode_column is None:
            return None
        return f"pilake dataset create {shlex.quote(name)} --sql {shlex.quote(self.sql)}"


def cell(value: Any) -> str:
    """A catalog value as the table shows it (long values cut, bytes as hex)."""
    if value is None:
        text = "NULL"
    elif isinstance(value, bytes):
        text = value[:32].hex() + ("…" if len(value) > 32 else "")
    elif isinstance(value, float):
        text = f"{value:.6g}"
    elif isinstance(value, list):
        text = "[" + ", ".join(cell(v) for v in value) + "]"
    else:
        text = str(value)
    return text if len(text) <= _CELL_CHARS else text[:_CELL_CHARS] + "…"


def screen(reader: Any, sql: str, functions: EngineFunctions) -> str:
    """`sql` checked as text (`check_select`) and as the engine parses it (`screen_ast`): the
    statement to run, or QueryRefused.

    Example:
        >>> screen(reader, "SELECT FiLe('/etc/passwd')", functions)
        Traceback (most recent call last):
        QueryRefused: function 'FiLe' reads the filesystem; ...
    """
    from pi_catalog import CatalogQueryError

    checked = check_select(sql)
    try:
        explain = reader.query_text(f"EXPLAIN AST\n{checked}")
    except CatalogQueryError as err:
        raise QueryRefused(f"ClickHouse cannot parse the query: {_first_line(err.detail)}") from err
    screen_ast(explain, functions)
    return checked


def _first_line(message: str) -> str:
    return message.strip().splitlines()[0][:500] if message.strip() else "(no message)"


def run_select(
    reader: Any, sql: str, *, functions: EngineFunctions, page: int, page_size: int, row_cap: int
) -> QueryResult:
    """Screen `sql` (`screen`), then run one page of it (and its capped row count) on `reader`,
    a pi_catalog IsolatedReader whose settings (`query_settings`) make it read-only and bounded.

    Raises:
        QueryRefused: the screen refused it, or the page is past the row cap.
        pi_catalog.CatalogQueryError: ClickHouse refused or failed it (a limit, a timeout, a
            wrong column; its message attached).

    Example:
        >>> with Catalog("/data/catalog").isolated_reader(query_settings(config)) as reader:
        ...     run_select(reader, "SELECT episode_id FROM episodes", functions=EngineFunctions.read(reader),
        ...                page=0, page_size=50, row_cap=10_000).total_rows
        1234
    """
    if page < 0:
        raise QueryRefused(f"page must be >= 0, got {page}")
    offset = page * page_size
    if offset >= row_cap:
        raise QueryRefused(f"page {page} starts past the row cap ({row_cap} rows); narrow the query")
    checked = screen(reader, sql, functions)
    limit = min(page_size, row_cap - offset)
    started = time.perf_counter()
    table = reader.query_arrow(wrap_select(checked, limit=limit, offset=offset))
    total = int(reader.query_arrow(_count_sql(checked, row_cap)).column("n")[0].as_py())
    elapsed = (time.perf_counter() - started) * 1e3
    columns = [table.column(i).to_pylist() for i in range(table.num_columns)]
    rows = tuple(tuple(cell(v) for v in row) for row in zip(*columns, strict=True))
    return QueryResult(
        sql=checked,
        columns=tuple(table.column_names),
        rows=rows,
        page=page,
        page_size=page_size,
        total_rows=total,
        row_cap=row_cap,
        capped=total > row_cap,
        elapsed_ms=elapsed,
    )
