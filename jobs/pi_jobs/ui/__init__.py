"""pi_jobs.ui: `pilake ui`, a read-only browser over a lake and its catalog, and `pilake view
--rerun`, an episode as a Rerun recording.

Pages (server-rendered, Starlette + Jinja2, charts by the vendored uPlot): Overview, Episodes
(a paged list filtered by robot, task, success, length, start time and annotation, sortable;
every value a bound parameter or a 400: `_episodes`), Dataset (length histogram, success by
robot and task, per-dimension quantiles merged from the stored sketches of a pin, a SQL
selection or the Episodes filters: `_dataset`; docs/ui.md), Query (one
SELECT over the catalog's tables only: screened on the engine's own parse, every function
classified, run read-only under time, memory and result limits, a bounded number at a time
beside the other pages; docs/ui-sql.md says what is protected and what is not), Episode
(every camera as an MP4 remuxed from the lake's H.264 chunks, proprio/action plots whose cursor
follows the video, their dimensions named from the robot registry and the annotations marked;
prev/next within the Episodes list it was opened from),
Quarantine and Pins. It reads through pi_catalog, pi_format.lake, pi_jobs.ops and
pi_jobs.maintenance.datasets, and writes nothing but its cache of remuxed videos.

Example:
    >>> from pi_jobs.ui import UiConfig, serve
    >>> serve(UiConfig(lake_root=".pilake/lake", catalog=".pilake/catalog", cache_dir=Path("/tmp/ui")))
"""

from pi_jobs.ui._app import create_app
from pi_jobs.ui._errors import NotFound, PathRefused, QueryBusy, QueryRefused, UiError
from pi_jobs.ui._rerun import write_rerun
from pi_jobs.ui._runner import QueryGate, SqlRunner, query_settings
from pi_jobs.ui._screen import EngineFunctions, screen_ast
from pi_jobs.ui._serve import serve, url_of
from pi_jobs.ui._sql import QueryResult, check_select, run_select, screen, wrap_select
from pi_jobs.ui._video import remux_mp4, safe_join
from pi_jobs.ui.config import UiConfig, is_loopback

__all__ = [
    "EngineFunctions",
    "NotFound",
    "PathRefused",
    "QueryBusy",
    "QueryGate",
    "QueryRefused",
    "QueryResult",
    "SqlRunner",
    "UiConfig",
    "UiError",
    "check_select",
    "create_app",
    "is_loopback",
    "query_settings",
    "remux_mp4",
    "run_select",
    "safe_join",
    "screen",
    "screen_ast",
    "serve",
    "url_of",
    "wrap_select",
    "write_rerun",
]
