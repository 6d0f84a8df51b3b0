"""Running the lake browser: uvicorn on the configured address, the URL printed."""

from __future__ import annotations

from pi_jobs.ui._app import create_app
from pi_jobs.ui.config import UiConfig


def url_of(config: UiConfig, port: int | None = None) -> str:
    """The URL a user opens (with the token, when there is one).

    Example:
        >>> url_of(UiConfig(lake_root="/l", catalog="/c", cache_dir=Path("/tmp/u")))
        'http://127.0.0.1:8765/'
    """
    host = f"[{config.host}]" if ":" in config.host else config.host
    url = f"http://{host}:{config.port if port is None else port}/"
    return url if config.token is None else f"{url}?token={config.token}"


def serve(config: UiConfig) -> None:
    """Serve the UI until interrupted (Ctrl-C).

    Raises:
        ImportError: the `ui` extra is not installed (naming it).

    Example:
        >>> serve(UiConfig(lake_root="/data/lake", catalog="/data/catalog", cache_dir=Path("/tmp/ui")))
    """
    try:
        import uvicorn
    except ImportError as err:
        raise ImportError("pilake ui needs the `ui` extra: pip install 'pi-lake[ui]'") from err
    app = create_app(config)
    print(
        f"pilake ui: {url_of(config)}  (lake {config.lake_root}, catalog {config.catalog}; Ctrl-C stops)",
        flush=True,
    )
    uvicorn.run(app, host=config.host, port=config.port, log_level="warning", access_log=False)
