"""The Query page's second check: what ClickHouse's own parser makes of a query.

`check_select` (pi_jobs.ui._sql) looks at the text; this looks at the tree the engine parses
from it (`EXPLAIN AST`, which parses and runs nothing), so case, quoting, comments and
whitespace cannot hide a name: `FiLe(`, `` `file`( ``, `/**/file/**/(` and `file\\n(` are all
`Function file` there. A query passes only when every node is one a SELECT over tables is made
of, every function is classified pure (pi_jobs.ui._functions) under the name the engine
resolves it to (case-insensitive names, aliases and aggregate combinators like `sumIf`,
`countDistinct` included), every table function is a pure generator, every table is one of
the current database's (unqualified: no `system.*`, `information_schema.*` or other database),
and there is no SETTINGS, FORMAT or INTO OUTFILE anywhere. Anything the parser prints that this
module does not understand is refused, not guessed at.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from pi_jobs.ui._errors import QueryRefused
from pi_jobs.ui._function_names import PURE
from pi_jobs.ui._functions import ALLOWED_TABLE_FUNCTIONS, REFUSED, REFUSED_TABLE_FUNCTIONS, SYNTAX_FUNCTIONS

_LINE = re.compile(r"^( *)([A-Za-z]+(?:::[A-Za-z]+)?)((?: .*)?)$")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Node types of a SELECT as ClickHouse 26.x prints them; `Set` (SETTINGS) has its own message.
_NODES = frozenset(
    {
        "SelectWithUnionQuery", "SelectIntersectExceptQuery", "SelectQuery", "ExpressionList",
        "WithElement", "Subquery", "Literal", "Function", "Identifier", "TablesInSelectQuery",
        "TablesInSelectQueryElement", "TableExpression", "TableIdentifier", "TableJoin",
        "ArrayJoin", "Asterisk", "QualifiedAsterisk", "ColumnsTransformerList",
        "ColumnsExceptTransformer", "ColumnsReplaceTransformer",
        "ColumnsReplaceTransformer::Replacement", "ColumnsRegexpMatcher", "ColumnsListMatcher",
        "QualifiedColumnsRegexpMatcher", "QualifiedColumnsListMatcher", "WindowDefinition",
        "WindowListElement", "OrderByElement", "InterpolateElement", "SampleRatio",
    }
)  # fmt: skip
_CLASSIFY_HINT = "classify it in pi_jobs/ui/_functions.py (tests/jobs/ui/test_functions.py says how)"


@dataclass(frozen=True, slots=True)
class EngineFunctions:
    """How the engine in use resolves a function name: exact names, case-insensitive ones,
    aliases and aggregate combinators (read from its system tables)."""

    exact: dict[str, tuple[bool, str]]  # name -> (is_aggregate, alias_to)
    lower: dict[str, str]  # lower-case name -> name, for case-insensitive functions
    combinators: tuple[str, ...]  # longest first

    @classmethod
    def read(cls, reader: Any) -> EngineFunctions:
        """From `reader.query_arrow` (a pi_catalog IsolatedReader on the catalog's engine)."""
        rows = reader.query_arrow(
            "SELECT name, is_aggregate, case_insensitive, alias_to FROM system.functions"
        ).to_pylist()
        combos = reader.query_arrow("SELECT name FROM system.aggregate_function_combinators").to_pylist()
        exact = {str(r["name"]): (bool(r["is_aggregate"]), str(r["alias_to"] or "")) for r in rows}
        lower = {str(r["name"]).lower(): str(r["name"]) for r in rows if r["case_insensitive"]}
        names = sorted((str(r["name"]) for r in combos), key=len, reverse=True)
        return cls(exact, lower, tuple(names))

    def _lookup(self, name: str) -> str | None:
        if name in self.exact:
            return name
        return self.lower.get(name.lower())

    def is_function(self, name: str) -> bool:
        """Whether `name` (exactly, or case-insensitively where the engine allows) is a function."""
        return self._lookup(name) is not None

    def refusal(self, name: str) -> str | None:
        """Why the function `name` may not run here, or None when it may."""
        if name in SYNTAX_FUNCTIONS:
            return None
        found = self._lookup(name)
        parts: list[str] = []
        if found is None:  # an aggregate with combinators: sumIf, countDistinctIf, uniqStateMerge
            base = name
            while found is None:
                suffix = next((c for c in self.combinators if base.endswith(c) and len(base) > len(c)), None)
                if suffix is None:
                    return f"function {name!r} is not known to the engine"
                base = base[: -len(suffix)]
                found = self._lookup(base)
                parts.append(suffix)
            if not self.exact[found][0]:
                return f"function {name!r} is not known to the engine"
        for candidate in (name, found, self.exact[found][1]):
            if not candidate:
                continue
            for refused, reason in REFUSED.items():
                if candidate.lower() == refused.lower():
                    return f"function {name!r} {reason}; the Query page reads the catalog's tables only"
        canonical = self.exact[found][1] or found
        canonical = self._lookup(canonical) or canonical
        if found not in PURE and canonical not in PURE:
            return f"function {name!r} is not classified as safe for the Query page; {_CLASSIFY_HINT}"
        return None


def _refuse_table(name: str) -> None:
    raise QueryRefused(
        f"table {name!r} is not the catalog's: the Query page reads the catalog's own tables "
        "(episodes, annotations, dataset_snapshots, ...), not system.*, information_schema or other "
        "databases"
    )


def screen_ast(explain: str, functions: EngineFunctions) -> None:
    """Refuse (QueryRefused) what the parsed query may not do; return when it passes.

    `explain` is the text of `EXPLAIN AST <query>` on the engine that will run it.

    Example:
        >>> screen_ast(reader.query_arrow("EXPLAIN AST SELECT file('/etc/passwd')")..., functions)
        Traceback (most recent call last):
        QueryRefused: function 'file' reads the filesystem; ...
    """
    lines = [line for line in explain.splitlines() if line.strip()]
    stack: list[str] = []  # node types of the current line's ancestors, by depth
    for index, line in enumerate(lines):
        match = _LINE.match(line)
        depth = len(match.group(1)) if match else -1
        if match is None or depth > len(stack) or (index > 0) == (depth == 0):
            raise QueryRefused(
                "the query's parsed form holds names the Query page cannot check (a quoted name "
                "with a line break or a control character?); rename them"
            )
        node, rest = match.group(2), match.group(3).strip()
        del stack[depth:]
        parent = stack[-1] if stack else ""
        stack.append(node)
        if index == 0 and node != "SelectWithUnionQuery":
            raise QueryRefused(f"only SELECT queries run here, got a {node}")
        if depth == 1 and node != "ExpressionList":
            raise QueryRefused(
                "the query ends in FORMAT or INTO OUTFILE; the Query page shows rows in its own "
                "table and writes no file"
            )
        if node == "Set":
            raise QueryRefused(
                "the query has a SETTINGS clause; the UI runs queries with its own read-only "
                "settings and limits, which a query may not change"
            )
        if node == "ColumnsApplyTransformer":
            # the parse shows neither the function APPLY names nor its lambda's body
            raise QueryRefused(
                "the query uses APPLY, which the Query page cannot check (the function it applies "
                "is not in the parsed form); call the function on the columns by name"
            )
        if node not in _NODES:
            raise QueryRefused(f"the query uses {node}, which the Query page does not run")
        name = rest.split(" (", 1)[0]
        if node == "Function":
            if not _NAME.match(name):
                raise QueryRefused(f"function name {name!r} is not a plain name; use the function's own name")
            if parent == "TableExpression":
                if name not in ALLOWED_TABLE_FUNCTIONS:
                    reason = REFUSED_TABLE_FUNCTIONS.get(name, "is not classified as safe")
                    raise QueryRefused(
                        f"table function {name!r} {reason}; the Query page reads the catalog's "
                        f"tables (and the generators {', '.join(sorted(ALLOWED_TABLE_FUNCTIONS))})"
                    )
                continue
            why = functions.refusal(name)
            if why is not None:
                raise QueryRefused(why)
        elif node == "TableIdentifier" and ("." in name or not _NAME.match(name)):
            _refuse_table(name)
        elif node == "Identifier" and _NAME.match(name) and functions.is_function(name):
            # a bare name that no column has is a call: `SELECT USER`, `SELECT CURRENT_DATABASE`
            why = functions.refusal(name)
            if why is not None:
                raise QueryRefused(f"the bare name {name!r} calls a function: {why}")
