"""The handlers of the Episodes and Dataset pages (routes in `_app`): the parameters checked
(`_episodes.EpisodeFilter`, FilterRefused -> 400), the catalog read with bound parameters
under the pages' catalog lock, users' SQL through the Query page's screen and bounded reader.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pi_jobs.ui import _dataset, _page_cache
from pi_jobs.ui._episodes import EpisodeFilter, FilterRefused, list_episodes, strict_page, where_on
from pi_jobs.ui._reads import iso

if TYPE_CHECKING:
    import pyarrow as pa
    from starlette.requests import Request
    from starlette.responses import Response

COLUMNS = (
    ("episode_id", "episode"),
    ("robot_id", "robot"),
    ("task", "task"),
    ("success", "success"),
    ("step_count", "steps"),
    ("duration_s", "seconds"),
    ("start_time_ns", "started (UTC)"),
)
# Most characters of a pin name taken (names are at most 128, SPEC 1.1).
_MAX_PIN_CHARS = 256


def episodes(pages: Any, request: Request) -> Response:
    params = request.query_params
    flt = EpisodeFilter.from_params(params)
    page = strict_page(params)
    with pages.catalog_lock:
        listing = list_episodes(pages.catalog, flt, page=page, page_size=pages.config.page_size)
    return pages.render(
        request, "episodes.html", nav="episodes", f=flt, listing=listing, columns=COLUMNS, iso=iso
    )


def dataset(pages: Any, request: Request) -> Response:
    """`/dataset?pin=NAME`, `/dataset?sql=SELECT ...` or `/dataset?<the Episodes filters>`."""
    params = request.query_params
    pin, sql = params.get("pin", ""), params.get("sql", "")
    names = pages.dimension_names
    layout = pages.layout
    if pin and sql:
        raise FilterRefused("give a pin or a sql selection, not both")
    if pin:
        if len(pin) > _MAX_PIN_CHARS:
            raise FilterRefused(f"pin is {len(pin):,} characters; pin names are at most 128 (SPEC 1.1)")

        def of_pin() -> Any:
            rows, wanted = _dataset.pin_rows(layout, pin)
            tally = _dataset.tally_rows(rows)
            return _dataset.dataset_stats(layout, tally, title=f"pin {pin}", names=names, pinned=wanted)

        stats = _page_cache.pin_stats(layout, pin, names, of_pin)  # kept per pin + episodes version
        source = {"pin": pin}
    elif sql:
        from pi_catalog import CatalogQueryError

        from pi_jobs.ui._errors import QueryRefused

        try:
            tally = pages.sql.on_selection(sql, lambda run, where: _dataset.tally_catalog(run, where))
        except QueryRefused as err:
            raise FilterRefused(f"refused: {err}") from None
        except CatalogQueryError as err:
            raise FilterRefused(f"ClickHouse: {err.detail}") from None
        stats = _dataset.dataset_stats(layout, tally, title="SQL selection", names=names)
        source = {"sql": sql}
    else:
        flt = EpisodeFilter.from_params(params)
        with pages.catalog_lock:
            pages.catalog.ensure_schema()
            where, bound = where_on(pages.catalog, flt)

            def run(statement: str) -> pa.Table:
                return pages.catalog.query_arrow(statement, bound)

            tally = _dataset.tally_catalog(run, where)
        shown = flt.query()
        title = f"episodes where {shown}" if shown else "every episode"
        stats = _dataset.dataset_stats(layout, tally, title=title, names=names)
        source = {"filter": shown}
    return pages.render(request, "dataset.html", nav="dataset", d=stats, chart=stats.chart(), source=source)


def _marks(times_s: tuple[float, ...], annotations: list[dict[str, str]]) -> list[dict[str, Any]]:
    """Each annotation as a span of the plots' time axis (its first to its last step)."""
    out: list[dict[str, Any]] = []
    if not times_s:
        return out
    last = len(times_s) - 1
    for a in annotations:
        try:
            first, end = int(a["step_start"]), int(a["step_end"])
        except ValueError:
            continue
        t0, t1 = times_s[min(max(first, 0), last)], times_s[min(max(end, 0), last)]
        out.append({"t0": t0, "t1": max(t1, t0), "label": f"{a['kind']}: {a['value']}"[:120]})
    return out


def episode_extras(
    pages: Any, request: Request, episode: Any, annotations: list[dict[str, str]]
) -> dict[str, Any]:
    """What the Episode page adds to the episode: its dimensions' names and annotation marks (in
    the plots' JSON) and, when it was opened from the Episodes page (its filters in the query),
    the previous and next episode of that list."""
    from urllib.parse import quote

    from pi_jobs.ui._episodes import neighbours

    flt = EpisodeFilter.from_params(request.query_params)
    robot_type = str(episode.row.get("robot_type", ""))
    names = {
        kind: list(pages.dimension_names.names(robot_type, kind, len(series)))
        for kind, series in (("proprio", episode.proprio), ("action", episode.action))
    }
    with pages.catalog_lock:
        before, after = neighbours(pages.catalog, flt, episode.episode_id)
    query = flt.query()

    def link(eid: str | None) -> str | None:
        return None if eid is None else "/episode/" + quote(eid, safe="") + ("?" + query if query else "")

    return {
        "names": names,
        "marks": _marks(episode.times_s, annotations),
        "prev_url": link(before),
        "next_url": link(after),
        "list_url": "/episodes" + ("?" + query if query else ""),
        "names_problem": pages.dimension_names.problem,
    }
