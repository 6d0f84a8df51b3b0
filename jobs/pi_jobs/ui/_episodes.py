"""The Episodes page: a paged, filtered, sorted list of the catalog's episodes, and the prev/next
neighbours of an episode within the same filter and sort.

Every filter value is checked here (`EpisodeFilter.from_params`: lengths, digits, dates, a sort
column from a fixed list) and reaches ClickHouse only as a bound parameter (`{name:Type}`): the
SQL text is built from this module's constants alone, never from what a user typed. A value
that does not pass is refused with FilterRefused (HTTP 400) naming the parameter, the value (cut)
and what would be accepted.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from pi_jobs.ui._errors import UiError


class FilterRefused(UiError):
    """A query parameter of the Episodes or Dataset page that is not a valid value (HTTP 400).

    Example:
        >>> EpisodeFilter.from_params({"min_steps": "-1"})
        Traceback (most recent call last):
        FilterRefused: min_steps must be a whole number of steps 0..999999999, got '-1'
    """


# Columns a user may sort by, with their ClickHouse type (the prev/next neighbour binds the
# current episode's value under it). Anything else in `sort` is refused, never pasted.
SORTABLE: dict[str, str] = {
    "committed_at_ns": "Int64",
    "start_time_ns": "Int64",
    "episode_id": "String",
    "robot_id": "String",
    "task": "String",
    "success": "Bool",
    "step_count": "Int32",
    "duration_s": "Float64",
}
LIST_COLUMNS = ("episode_id", "robot_id", "task", "success", "step_count", "duration_s", "start_time_ns")
# Names are at most 128 characters (SPEC 1.1); a task is free text, a few dozen. 1,024 leaves
# room for any real value while a 10 kB parameter is refused before it reaches the engine.
MAX_TEXT_CHARS = 1024
_DIGITS = re.compile(r"[0-9]{1,9}")
_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}([T ][0-9]{2}:[0-9]{2}(:[0-9]{2})?)?")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_BOOL = {"": None, "any": None, "yes": True, "true": True, "1": True, "no": False, "false": False, "0": False}
# Most distinct robots/tasks offered as suggestions in the filter form (a datalist).
MAX_SUGGESTIONS = 500


def _cut(value: str) -> str:
    return repr(value if len(value) <= 60 else value[:60] + "…")


def _text(params: Mapping[str, str], name: str) -> str:
    value = params.get(name, "")
    if len(value) > MAX_TEXT_CHARS:
        raise FilterRefused(
            f"{name} is {len(value):,} characters, more than the {MAX_TEXT_CHARS:,} a filter takes "
            f"(names are at most 128, SPEC 1.1): {_cut(value)}"
        )
    if _CONTROL.search(value):
        raise FilterRefused(f"{name} holds a control character (names have none): {_cut(value)}")
    return value.strip()


def _count(params: Mapping[str, str], name: str) -> int | None:
    value = params.get(name, "").strip()
    if not value:
        return None
    if not _DIGITS.fullmatch(value):
        raise FilterRefused(f"{name} must be a whole number of steps 0..999999999, got {_cut(value)}")
    return int(value)


def _time_ns(params: Mapping[str, str], name: str) -> int | None:
    value = params.get(name, "").strip()
    if not value:
        return None
    if not _DATE.fullmatch(value):
        raise FilterRefused(
            f"{name} must be a UTC date YYYY-MM-DD or time YYYY-MM-DDTHH:MM[:SS], got {_cut(value)}"
        )
    try:
        when = datetime.fromisoformat(value).replace(tzinfo=UTC)
    except ValueError as err:
        raise FilterRefused(f"{name} is not a calendar date: {_cut(value)} ({err})") from None
    return int(when.timestamp()) * 1_000_000_000


@dataclass(frozen=True, slots=True)
class EpisodeFilter:
    """What the Episodes page lists: filters (empty / None: any) and the order.

    Example:
        >>> f = EpisodeFilter.from_params({"robot": "arm-7", "success": "yes", "sort": "step_count"})
        >>> f.where()
        ('robot_id = {robot:String} AND success = {success:Bool}', {'robot': 'arm-7', 'success': True})
    """

    robot: str = ""
    task: str = ""
    success: bool | None = None
    min_steps: int | None = None
    max_steps: int | None = None
    since: str = ""  # as typed (a checked date), shown back in the form
    until: str = ""
    annotation: str = ""  # an annotation kind, or text in an annotation's value
    sort: str = "committed_at_ns"  # newest first: what just streamed in is what one looks at
    order: str = "desc"

    def __post_init__(self) -> None:
        if self.sort not in SORTABLE:
            raise FilterRefused(f"sort must be one of {sorted(SORTABLE)}, got {_cut(self.sort)}")
        if self.order not in ("asc", "desc"):
            raise FilterRefused(f"order must be 'asc' or 'desc', got {_cut(self.order)}")
        if self.min_steps is not None and self.max_steps is not None and self.min_steps > self.max_steps:
            raise FilterRefused(f"min_steps ({self.min_steps}) is above max_steps ({self.max_steps})")
        since, until = self.since_ns, self.until_ns  # checks the dates
        if since is not None and until is not None and since > until:
            raise FilterRefused(f"since ({self.since}) is after until ({self.until})")

    @classmethod
    def from_params(cls, params: Mapping[str, str]) -> EpisodeFilter:
        """The filter of a request's query parameters (others, like `page`, are ignored).

        Raises:
            FilterRefused: a value that is too long, holds a control character, is not a count,
                a date, a yes/no, a sortable column or asc/desc (the message names it).
        """
        success_text = params.get("success", "").strip().lower()
        if success_text not in _BOOL:
            raise FilterRefused(f"success must be yes, no or any, got {_cut(success_text)}")
        for name in ("sort", "order"):
            if len(params.get(name, "")) > 64:
                raise FilterRefused(f"{name} is {len(params[name]):,} characters; see the column headers")
        return cls(
            robot=_text(params, "robot"),
            task=_text(params, "task"),
            success=_BOOL[success_text],
            min_steps=_count(params, "min_steps"),
            max_steps=_count(params, "max_steps"),
            since=params.get("since", "").strip()[:64],
            until=params.get("until", "").strip()[:64],
            annotation=_text(params, "annotation"),
            sort=params.get("sort", "").strip() or "committed_at_ns",
            order=params.get("order", "").strip().lower() or "desc",
        )

    @property
    def since_ns(self) -> int | None:
        return _time_ns({"since": self.since}, "since")

    @property
    def until_ns(self) -> int | None:
        # a bare date means the whole of that day
        ns = _time_ns({"until": self.until}, "until")
        if ns is not None and len(self.until) == 10:
            ns += 86_400 * 1_000_000_000 - 1
        return ns

    def where(self, *, annotations: bool = True) -> tuple[str, dict[str, Any]]:
        """The WHERE clause (placeholders only) and its parameters; `annotations` False: the
        catalog has no annotations table yet, so an annotation filter matches nothing."""
        terms: list[str] = []
        params: dict[str, Any] = {}
        if self.robot:
            terms.append("robot_id = {robot:String}")
            params["robot"] = self.robot
        if self.task:
            terms.append("task = {task:String}")
            params["task"] = self.task
        if self.success is not None:
            terms.append("success = {success:Bool}")
            params["success"] = self.success
        if self.min_steps is not None:
            terms.append("step_count >= {min_steps:Int64}")
            params["min_steps"] = self.min_steps
        if self.max_steps is not None:
            terms.append("step_count <= {max_steps:Int64}")
            params["max_steps"] = self.max_steps
        if self.since_ns is not None:
            terms.append("start_time_ns >= {since:Int64}")
            params["since"] = self.since_ns
        if self.until_ns is not None:
            terms.append("start_time_ns <= {until:Int64}")
            params["until"] = self.until_ns
        if self.annotation and not annotations:
            terms.append("0")
        elif self.annotation:
            terms.append(
                "episode_id IN (SELECT episode_id FROM annotations WHERE kind = {annotation:String} "
                "OR positionCaseInsensitiveUTF8(value, {annotation:String}) > 0)"
            )
            params["annotation"] = self.annotation
        return (" AND ".join(terms) or "1"), params

    def query(self, **changes: Any) -> str:
        """This filter (with `changes`) as a query string, defaults left out."""
        changed = replace(self, **changes) if changes else self
        default = EpisodeFilter()
        pairs = []
        for f in fields(self):
            value = getattr(changed, f.name)
            if value != getattr(default, f.name):
                text = ("yes" if value else "no") if isinstance(value, bool) else str(value)
                pairs.append((f.name, text))
        return urlencode(pairs)

    def sorted_by(self, column: str) -> str:
        """The query string that sorts by `column` (a second click on it reverses the order)."""
        order = "asc" if column == self.sort and self.order == "desc" else "desc"
        return self.query(sort=column, order=order)


@dataclass(frozen=True, slots=True)
class EpisodeList:
    """One page of the list, the total, and the suggestions of the filter form."""

    rows: tuple[dict[str, Any], ...]
    total: int
    page: int
    page_size: int
    robots: tuple[str, ...]
    tasks: tuple[str, ...]

    @property
    def has_next(self) -> bool:
        return (self.page + 1) * self.page_size < self.total


def where_on(catalog: Any, flt: EpisodeFilter) -> tuple[str, dict[str, Any]]:
    """`flt.where()` for this catalog (whether it has the annotations table yet)."""
    if not flt.annotation:
        return flt.where()
    found = catalog.query_arrow(
        "SELECT count() AS n FROM system.tables WHERE database = currentDatabase() AND name = 'annotations'"
    )
    return flt.where(annotations=bool(found["n"][0].as_py()))


def list_episodes(catalog: Any, flt: EpisodeFilter, *, page: int, page_size: int) -> EpisodeList:
    """One page of the episodes `flt` selects, in its order (episode id breaks ties).

    Example:
        >>> list_episodes(catalog, EpisodeFilter(robot="arm-7"), page=0, page_size=50).total
        1234
    """
    catalog.ensure_schema()
    where, params = where_on(catalog, flt)
    direction = "DESC" if flt.order == "desc" else "ASC"
    order = f"{flt.sort} {direction}, episode_id {direction}"  # both from fixed lists
    rows = catalog.query_arrow(
        f"SELECT {', '.join(LIST_COLUMNS)} FROM episodes WHERE {where} ORDER BY {order} "
        f"LIMIT {int(page_size)} OFFSET {int(page) * int(page_size)}",
        params,
    ).to_pylist()
    total = int(
        catalog.query_arrow(f"SELECT count() AS n FROM episodes WHERE {where}", params)["n"][0].as_py()
    )
    facets = catalog.query_arrow(
        "SELECT 'robot' AS k, robot_id AS v FROM (SELECT DISTINCT robot_id FROM episodes "
        f"ORDER BY robot_id LIMIT {MAX_SUGGESTIONS}) UNION ALL SELECT 'task' AS k, task AS v FROM "
        f"(SELECT DISTINCT task FROM episodes ORDER BY task LIMIT {MAX_SUGGESTIONS})"
    ).to_pylist()
    return EpisodeList(
        rows=tuple(rows),
        total=total,
        page=page,
        page_size=page_size,
        robots=tuple(sorted(str(f["v"]) for f in facets if f["k"] == "robot")),
        tasks=tuple(sorted(str(f["v"]) for f in facets if f["k"] == "task")),
    )


def neighbours(catalog: Any, flt: EpisodeFilter, episode_id: str) -> tuple[str | None, str | None]:
    """The episodes before and after `episode_id` in the list `flt` makes (None at either end,
    or both when the catalog does not hold `episode_id`)."""
    where, params = where_on(catalog, flt)
    current = catalog.query_arrow(
        f"SELECT {flt.sort} AS v FROM episodes WHERE episode_id = {{current:String}} LIMIT 1",
        {"current": episode_id},
    )
    if current.num_rows == 0:
        return None, None
    kind = SORTABLE[flt.sort]
    params = {**params, "current": episode_id, "value": current["v"][0].as_py()}
    key = f"({flt.sort}, episode_id)"
    at = f"({{value:{kind}}}, {{current:String}})"
    out = []
    for cmp, direction in (("<", "DESC"), (">", "ASC")):
        table = catalog.query_arrow(
            f"SELECT episode_id FROM episodes WHERE {where} AND {key} {cmp} {at} "
            f"ORDER BY {flt.sort} {direction}, episode_id {direction} LIMIT 1",
            params,
        )
        out.append(str(table["episode_id"][0].as_py()) if table.num_rows else None)
    before, after = out
    # in a descending list the one before is the larger
    return (after, before) if flt.order == "desc" else (before, after)


# Pages past this are empty on any lake this UI serves (50 rows a page: 50 million rows).
MAX_PAGE = 1_000_000


def strict_page(params: Mapping[str, str]) -> int:
    """The `page` parameter: 0 when absent; FilterRefused for anything but 0..MAX_PAGE.

    Example:
        >>> strict_page({"page": "3"})
        3
    """
    value = params.get("page", "").strip()
    if not value:
        return 0
    if not _DIGITS.fullmatch(value) or int(value) > MAX_PAGE:
        raise FilterRefused(f"page must be a whole number 0..{MAX_PAGE:,}, got {_cut(value)}")
    return int(value)
