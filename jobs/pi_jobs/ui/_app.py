"""The lake browser's web application (Starlette): server-rendered pages over the catalog and
the lake, video files with HTTP range requests, a token check for non-loopback hosts.

Pages render on the server with Jinja2 (autoescaped: an episode id, annotation or quarantine
reason holding HTML shows as text); the only scripts are the vendored uPlot and `static/ui.js`,
and the Content-Security-Policy allows no inline script, so injected markup could not run even
if it got through. The pages' own catalog calls take turns (chdb runs one engine per process);
users' SQL runs beside them on handles of its own, a bounded number at a time (`_runner`).
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

from pi_format import LakeLayout

from pi_jobs.ui import _browse, _ops, _reads
from pi_jobs.ui._episodes import FilterRefused
from pi_jobs.ui._errors import NotFound, PathRefused, QueryBusy, QueryRefused
from pi_jobs.ui._names import DimensionNames
from pi_jobs.ui._runner import SqlRunner
from pi_jobs.ui._video import cached_mp4, safe_join
from pi_jobs.ui.config import UiConfig, is_loopback

if TYPE_CHECKING:  # starlette is the `ui` extra, imported when an app is made
    from starlette.requests import Request
    from starlette.responses import Response

HERE = Path(__file__).resolve().parent
STATIC_DIR = HERE / "static"
TEMPLATE_DIR = HERE / "templates"
TOKEN_COOKIE = "pilake_ui_token"
_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "media-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
# Names are at most 128 characters (SPEC 1.1); the catalog may hold longer text, not this long.
_MAX_ID_CHARS = 1024
# Pages past this are empty on any lake this UI serves (50 rows a page: 50 million rows).
_MAX_PAGE = 1_000_000
_EXAMPLE_SQL = (
    "SELECT episode_id, robot_id, task, success, step_count, duration_s\n"
    "FROM episodes\nORDER BY committed_at_ns DESC"
)


class _Pages:
    """The handlers, over one config, one catalog and one lock around it."""

    def __init__(self, config: UiConfig, catalog: Any) -> None:
        self.config = config
        self.catalog = catalog
        self.layout = LakeLayout(config.lake_root)
        # Overview and Episode take turns on the catalog; users' SQL runs beside them (_runner)
        self.catalog_lock = threading.Lock()
        self.sql = SqlRunner(config, catalog)
        self.dimension_names = DimensionNames(config.robots)
        from starlette.templating import Jinja2Templates

        self.templates = Jinja2Templates(directory=str(TEMPLATE_DIR))
        env = self.templates.env
        env.filters["episode_url"] = lambda eid: "/episode/" + quote(str(eid), safe="")
        env.globals["config"] = config

    def render(self, request: Request, name: str, status: int = 200, **context: Any) -> Response:
        context.setdefault("rendered_at", _reads.now_text())
        return self.templates.TemplateResponse(request, name, context, status_code=status)

    @staticmethod
    def _page(request: Request) -> int:
        """The `page` parameter: 0 when absent, malformed or negative, at most _MAX_PAGE."""
        text = request.query_params.get("page", "0")
        if len(text) > 12:  # int() of a long digit string costs time before it fails
            return 0
        try:
            return min(max(int(text), 0), _MAX_PAGE)
        except ValueError:
            return 0

    def overview(self, request: Request) -> Response:
        with self.catalog_lock:
            data = _reads.overview(self.catalog, self.layout)
        chart = {"x": list(data.commits_hour_s), "y": list(data.commits_count)}
        return self.render(request, "overview.html", nav="overview", o=data, chart=chart)

    def query(self, request: Request) -> Response:
        sql = request.query_params.get("sql")
        page = self._page(request)
        result, error, status, headers = None, None, 200, {}
        if sql:
            from pi_catalog import CatalogQueryError

            try:
                result = self.sql.run(sql, page=page)
            except QueryRefused as err:
                error, status = f"refused: {err}", 400
            except QueryBusy as err:
                error, status, headers = f"busy: {err}", 503, {"Retry-After": "5"}
            except CatalogQueryError as err:
                error, status = f"ClickHouse: {err.detail}", 400

        def page_url(p: int) -> str:
            return "/query?" + urlencode({"sql": sql or "", "page": p})

        response = self.render(
            request,
            "query.html",
            status,
            nav="query",
            sql=(sql or _EXAMPLE_SQL)[: self.config.max_sql_chars],
            result=result,
            error=error,
            page_url=page_url,
        )
        response.headers.update(headers)
        return response

    @staticmethod
    def _id(request: Request, name: str) -> str:
        """A path parameter, refused (404) past _MAX_ID_CHARS before anything reads with it."""
        value = str(request.path_params[name])
        if len(value) > _MAX_ID_CHARS:
            raise NotFound(f"no {name} of {len(value)} characters: names are at most 128 (SPEC 1.1)")
        return value

    def episode(self, request: Request) -> Response:
        episode_id = self._id(request, "episode_id")
        episode = _reads.read_episode(self.layout, episode_id)
        annotations = _reads.episode_annotations(self.layout, episode_id)
        extras = _browse.episode_extras(self, request, episode, annotations)
        with self.catalog_lock:
            lineage = _reads.lineage(self.catalog, episode)
            trace = _reads.trace_lines(self.layout, self.catalog, episode_id, self.config.log_dirs)
        plots = {
            "t": list(episode.times_s),
            "proprio": [list(s) for s in episode.proprio],
            "action": [list(s) for s in episode.action],
            "names": extras["names"],
            "marks": extras["marks"],
        }
        return self.render(
            request,
            "episode.html",
            nav="episode",
            e=episode,
            plots=plots,
            lineage=lineage,
            trace=trace,
            annotations=annotations,
            x=extras,
            video_url=lambda cam: f"/episode/{quote(episode_id, safe='')}/video/{quote(cam, safe='')}",
        )

    def video(self, request: Request) -> Response:
        episode_id = self._id(request, "episode_id")
        camera = self._id(request, "camera")
        row, _ = _reads.episode_rows(self.layout, episode_id)  # the visible attempt, no steps
        attempt, cameras = str(row["attempt_id"]), list(row["cameras"])
        if camera not in cameras:
            raise NotFound(f"episode {episode_id!r} has no camera {camera!r}; it has {cameras}")
        cache = self.config.cache_dir
        path = cached_mp4(cache, episode_id, attempt, camera, None)
        if not path.exists():
            chunks = _reads.video_rows(self.layout, episode_id, attempt, camera, row)
            path = cached_mp4(cache, episode_id, attempt, camera, chunks)
        from starlette.responses import FileResponse

        # FileResponse answers Range requests (206 + Content-Range): the browser seeks in it
        return FileResponse(path, media_type="video/mp4", headers={"Cache-Control": "private, max-age=3600"})

    def quarantine(self, request: Request) -> Response:
        page = self._page(request)
        include_closed = request.query_params.get("all") == "1"
        rows, total = _ops.quarantine_page(
            self.layout, page=page, page_size=self.config.page_size, include_closed=include_closed
        )
        return self.render(
            request,
            "quarantine.html",
            nav="quarantine",
            rows=rows,
            total=total,
            page=page,
            include_closed=include_closed,
            page_size=self.config.page_size,
        )

    def pins(self, request: Request) -> Response:
        page = self._page(request)
        rows, total = _ops.pins_page(self.layout, page=page, page_size=self.config.page_size)
        return self.render(
            request,
            "pins.html",
            nav="pins",
            rows=rows,
            total=total,
            page=page,
            page_size=self.config.page_size,
        )

    def static(self, request: Request) -> Response:
        path = safe_join(STATIC_DIR, request.path_params["path"])
        if not path.is_file():
            raise NotFound(f"no static file {request.path_params['path']!r}")
        from starlette.responses import FileResponse

        return FileResponse(path)


def _error_handlers(pages: _Pages) -> dict[Any, Callable[[Request, Exception], Awaitable[Response]]]:
    async def not_found(request: Request, exc: Exception) -> Response:
        return pages.render(request, "error.html", 404, nav="", title="Not found", message=str(exc))

    async def refused(request: Request, exc: Exception) -> Response:
        from starlette.responses import PlainTextResponse

        return PlainTextResponse(f"refused: {exc}", status_code=400)

    async def bad_parameter(request: Request, exc: Exception) -> Response:
        return pages.render(request, "error.html", 400, nav="", title="Refused", message=str(exc))

    async def busy(request: Request, exc: Exception) -> Response:
        response = pages.render(request, "error.html", 503, nav="", title="Busy", message=f"busy: {exc}")
        response.headers["Retry-After"] = "5"
        return response

    async def failed(request: Request, exc: Exception) -> Response:
        # the catalog or the lake could not be read: say what failed, on a page, not a traceback
        message = f"{type(exc).__name__}: {exc}"
        return pages.render(
            request, "error.html", 500, nav="", title="Could not read the lake", message=message
        )

    from pi_catalog import PiCatalogError
    from pi_format.errors import PiFormatError

    from pi_jobs.errors import PiJobsError

    return {
        NotFound: not_found,
        PathRefused: refused,
        FilterRefused: bad_parameter,
        QueryBusy: busy,
        PiCatalogError: failed,
        PiFormatError: failed,
        PiJobsError: failed,
    }


def _token_middleware(app: Any, token: str) -> Any:
    from starlette.requests import Request
    from starlette.responses import PlainTextResponse

    async def guarded(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        request = Request(scope)
        given = request.query_params.get("token") or request.cookies.get(TOKEN_COOKIE) or ""
        bearer = request.headers.get("authorization", "")
        if bearer.lower().startswith("bearer "):
            given = bearer[7:]
        if not secrets.compare_digest(given.encode(), token.encode()):
            response: Response = PlainTextResponse(
                "this pilake ui needs its token: open the URL `pilake ui` printed (…/?token=…)",
                status_code=401,
            )
            await response(scope, receive, send)
            return
        if request.query_params.get("token"):

            async def send_with_cookie(message: dict[str, Any]) -> None:
                if message["type"] == "http.response.start":
                    cookie = f"{TOKEN_COOKIE}={token}; HttpOnly; SameSite=Strict; Path=/"
                    message["headers"] = [*message.get("headers", []), (b"set-cookie", cookie.encode())]
                await send(message)

            await app(scope, receive, send_with_cookie)
            return
        await app(scope, receive, send)

    return guarded


# Host names a browser uses for a server on loopback. Anything else in the Host header of a
# request to a loopback-bound UI is a DNS-rebinding page (evil.example resolving to 127.0.0.1)
# reading the lake from the user's browser: refused.
_LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "[::1]", "::1"})


def _loopback_hosts_only(app: Any) -> Any:
    async def checked(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = dict(scope.get("headers") or [])
            host = headers.get(b"host", b"").decode("latin-1")
            name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
            if name not in _LOOPBACK_HOSTS:
                from starlette.responses import PlainTextResponse

                response = PlainTextResponse(
                    f"refused: Host {host!r} is not this machine's loopback address; open "
                    "http://127.0.0.1:PORT/ (or start pilake ui with --host and --token)",
                    status_code=400,
                )
                await response(scope, receive, send)
                return
        await app(scope, receive, send)

    return checked


def _security_headers(app: Any) -> Any:
    async def with_headers(scope: dict[str, Any], receive: Any, send: Any) -> None:
        async def send_headers(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                extra = [
                    (b"content-security-policy", _CSP.encode()),
                    (b"x-content-type-options", b"nosniff"),
                    (b"referrer-policy", b"no-referrer"),
                ]
                message["headers"] = [*message.get("headers", []), *extra]
            await send(message)

        await app(scope, receive, send_headers if scope["type"] == "http" else send)

    return with_headers


def create_app(config: UiConfig, catalog: Any = None) -> Any:
    """The ASGI application of `pilake ui` (serve it with uvicorn, or test it with
    starlette.testclient.TestClient).

    Args:
        config: what to serve (UiConfig).
        catalog: a pi_catalog.Catalog; by default one on `config.catalog`.

    Example:
        >>> app = create_app(UiConfig(lake_root="/data/lake", catalog="/data/catalog",
        ...                           cache_dir=Path("/tmp/pilake-ui")))
    """
    try:
        from starlette.applications import Starlette
        from starlette.responses import FileResponse
        from starlette.routing import Route
    except ImportError as err:
        raise ImportError("pilake ui needs the `ui` extra: pip install 'pi-lake[ui]'") from err
    if catalog is None:
        from pi_catalog import Catalog

        catalog = Catalog(config.catalog)
    pages = _Pages(config, catalog)
    # the Episode page's trace reads four tables: open them now, not at the first request
    from pi_jobs.ops.trace import warm_tables

    threading.Thread(target=warm_tables, args=(pages.layout,), name="ui-warm", daemon=True).start()
    routes = [
        Route("/", pages.overview),
        Route("/query", pages.query),
        Route("/episodes", lambda request: _browse.episodes(pages, request)),
        Route("/dataset", lambda request: _browse.dataset(pages, request)),
        # ids are names (SPEC 1.1) but the catalog may hold any text: match a `/` in one too
        Route("/episode/{episode_id:path}/video/{camera}", pages.video),
        Route("/episode/{episode_id:path}", pages.episode),
        Route("/quarantine", pages.quarantine),
        Route("/pins", pages.pins),
        Route("/static/{path:path}", pages.static),
        Route("/favicon.ico", lambda _: FileResponse(STATIC_DIR / "favicon.svg", media_type="image/svg+xml")),
    ]
    app: Any = Starlette(routes=routes, exception_handlers=_error_handlers(pages))
    app.state.pages = pages
    if config.token is not None:
        app = _token_middleware(app, config.token)
    if is_loopback(config.host):
        app = _loopback_hosts_only(app)
    outer = _security_headers(app)
    outer.pages = pages  # the handlers and their state (the Query page's gate), for tests
    return outer
