"""The pages through starlette's TestClient (in process, no socket): what each shows, that HTML
from the data is escaped, that file routes stay in their folder, that videos are the lake's
frames, and the token rule."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np
import pytest
from pi_format.video import decode_chunk_rgb, decode_container, frame_to_rgb
from pi_jobs.ui import PathRefused, UiConfig, create_app, safe_join
from pi_jobs.ui._reads import video_rows
from starlette.testclient import TestClient

from tests.jobs.ui.conftest import HTML_EPISODE_ID, QUARANTINE_ID, SCRIPT, UiLake

LOCAL = "http://127.0.0.1:8765"  # the Host a browser sends to `pilake ui`


def _config(ui_lake: UiLake, **kwargs: object) -> UiConfig:
    return UiConfig(
        lake_root=ui_lake.layout.root,
        catalog=ui_lake.catalog,
        cache_dir=ui_lake.cache,
        **kwargs,  # type: ignore[arg-type]
    )


@pytest.fixture(scope="module")
def client(ui_lake: UiLake) -> Iterator[TestClient]:
    with TestClient(create_app(_config(ui_lake, page_size=2)), base_url=LOCAL) as test_client:
        yield test_client


def _ok(client: TestClient, url: str) -> str:
    response = client.get(url)
    assert response.status_code == 200, response.text[:500]
    assert SCRIPT not in response.text  # never the raw markup
    assert "content-security-policy" in response.headers
    return response.text


def test_overview(client: TestClient) -> None:
    html = _ok(client, "/")
    assert 'id="n-episodes">4<' in html  # 3 lake episodes + the catalog-only row
    assert "bad_magic&lt;script&gt;" in html  # open quarantine by reason, escaped
    assert 'id="commits-data"' in html


def test_query_rows_links_and_pin_command(client: TestClient) -> None:
    sql = "SELECT episode_id, task FROM episodes ORDER BY episode_id"
    html = _ok(client, "/query?sql=" + quote(sql))
    assert '<a href="/episode/ep-000">ep-000</a>' in html
    # the HTML id as text, and its link percent-encoded
    assert "pilake dataset create my-dataset --sql" in html
    assert "page 1" in html and 'id="next-page"' in html  # page_size 2 of 4 rows
    page2 = _ok(client, "/query?page=1&sql=" + quote(sql))
    assert "ep-002" in page2 and "ep-000" not in page2
    assert "ep-&lt;script&gt;" in page2 and f'href="/episode/{quote(HTML_EPISODE_ID, safe="")}"' in page2


@pytest.mark.parametrize(
    "sql",
    [
        "INSERT INTO episodes_index SELECT * FROM episodes_index",
        "DROP TABLE episodes_index",
        "SELECT 1; DROP TABLE episodes_index",
        "SELECT count() FROM episodes SETTINGS readonly=0",
    ],
)
def test_query_refuses_non_select(client: TestClient, sql: str) -> None:
    response = client.get("/query?sql=" + quote(sql))
    assert response.status_code == 400
    assert 'id="query-error">refused:' in response.text
    assert _ok(client, "/query?sql=" + quote("SELECT count() AS n FROM episodes")).count("<td>4</td>") == 1


def test_episode_page(client: TestClient, ui_lake: UiLake) -> None:
    html = _ok(client, "/episode/ep-002")
    for camera in ("front", "wrist"):
        # both cameras' first frames are at the first step's time: no offset for the cursor
        assert f'src="/episode/ep-002/video/{camera}" data-offset="0.0"' in html
    assert 'id="plot-data"' in html and "proprio" in html
    assert "pick it &lt;script&gt;" in html  # the annotation, escaped
    assert ui_lake.lake.episodes["ep-002"].attempt_id in html
    assert "stream job" in html  # lineage of the attempt


def test_unknown_and_html_episode_ids_are_404_and_escaped(client: TestClient) -> None:
    response = client.get("/episode/" + quote(HTML_EPISODE_ID, safe=""))
    assert response.status_code == 404
    assert SCRIPT not in response.text and "&lt;script&gt;" in response.text
    assert client.get("/episode/ep-000/video/nope").status_code == 404


def test_quarantine_page(client: TestClient) -> None:
    html = _ok(client, "/quarantine")
    assert QUARANTINE_ID in html and "details &lt;script&gt;" in html
    assert "pilake quarantine release ep-bad" in html
    assert "50 49 45 50 01" in html  # the raw message's first bytes ("PIEP\x01")


def test_pins_page(client: TestClient) -> None:
    html = _ok(client, "/pins")
    assert "<code>picks</code>" in html and '<span class="ok">intact</span>' in html


@pytest.mark.parametrize(
    "raw_path",
    ["/static/..%2F..%2F..%2Fetc%2Fpasswd", "/static/%2Fetc%2Fpasswd", "/static/css%2F..%2F..%2Fui.js"],
)
def test_file_routes_refuse_paths_outside(client: TestClient, raw_path: str) -> None:
    response = client.get(raw_path)
    assert response.status_code == 400 and "refused" in response.text
    assert client.get("/static/ui.js").status_code == 200


@pytest.mark.parametrize("bad", ["../x", "/etc/passwd", "a/../../b", "a//b", "", "C:/x", "..\\x"])
def test_safe_join_refuses(bad: str, tmp_path: Path) -> None:
    with pytest.raises(PathRefused, match="file path"):
        safe_join(tmp_path, bad)
    assert safe_join(tmp_path, "a/b.txt") == tmp_path.resolve() / "a" / "b.txt"


def test_video_is_the_lakes_frames_with_range_requests(client: TestClient, ui_lake: UiLake) -> None:
    ep = ui_lake.lake.episodes["ep-001"]
    full = client.get("/episode/ep-001/video/wrist")
    assert full.status_code == 200 and full.headers["content-type"] == "video/mp4"
    part = client.get("/episode/ep-001/video/wrist", headers={"Range": "bytes=0-99"})
    assert part.status_code == 206 and part.headers["content-range"] == f"bytes 0-99/{len(full.content)}"
    assert part.content == full.content[:100]
    served = [frame_to_rgb(f) for f in decode_container(full.content)]
    chunks = video_rows(ui_lake.layout, "ep-001", ep.attempt_id, "wrist")
    w, h = ui_lake.lake.size
    lake = [
        f for data in chunks.column("data").to_pylist() for f in decode_chunk_rgb(data, height=h, width=w)
    ]
    assert len(served) == len(lake) == len(ep.frames["wrist"])
    # remuxed, not re-encoded: every decoded pixel is the same
    assert all(np.array_equal(a, b) for a, b in zip(served, lake, strict=True))


def test_video_timestamps_follow_the_rows(client: TestClient, ui_lake: UiLake) -> None:
    import av

    content = client.get("/episode/ep-000/video/wrist").content
    path = ui_lake.cache / "check.mp4"
    path.write_bytes(content)
    with av.open(str(path)) as container:
        stream: Any = container.streams.video[0]
        duration_s = float(stream.duration * stream.time_base)
        times = [float(f.time) for f in container.decode(video=0)]
    # as long as the episode's frames: the last frame lasts one frame interval
    assert duration_s == pytest.approx(len(times) / 5.0, abs=1e-3)
    # the wrist camera runs at half the control rate (5 fps): frame k at k / 5 s
    assert times == pytest.approx([k / 5.0 for k in range(len(times))], abs=1e-3)


def test_token_required_off_loopback(ui_lake: UiLake) -> None:
    with pytest.raises(ValueError, match="reachable from other machines: pass --token"):
        _config(ui_lake, host="0.0.0.0")
    with pytest.raises(ValueError, match="at least 16 characters"):
        _config(ui_lake, host="0.0.0.0", token="short")
    token = "t0ken-for-the-ui-test"
    with TestClient(create_app(_config(ui_lake, host="0.0.0.0", token=token))) as guarded:
        assert guarded.get("/pins").status_code == 401
        assert guarded.get("/pins?token=wrong-token-wrong-token").status_code == 401
        first = guarded.get(f"/pins?token={token}")
        assert first.status_code == 200 and "pilake_ui_token" in first.headers["set-cookie"]
        assert guarded.get("/pins").status_code == 200  # the cookie now
    with TestClient(create_app(_config(ui_lake, host="0.0.0.0", token=token))) as fresh:
        assert fresh.get("/pins", headers={"Authorization": f"Bearer {token}"}).status_code == 200


def test_pin_integrity_is_check_dataset(ui_lake: UiLake, tmp_path: Path) -> None:
    import shutil

    from deltalake import DeltaTable
    from pi_format import LakeLayout
    from pi_format.lake import PinStore
    from pi_jobs.maintenance.datasets import check_dataset, create_dataset
    from pi_jobs.ui._ops import check_pins

    # a copy of the lake with a second pin, whose marker row is then removed behind the lake's
    # back (as a lost file would): that pin is no longer intact, the other one still is
    root = tmp_path / "lake"
    shutil.copytree(ui_lake.layout.root, root)
    layout = LakeLayout(str(root))
    create_dataset(layout, "ep1", episode_ids=["ep-001"])
    names = sorted(p.name for p in PinStore(layout).summaries())
    assert [(c.pin.name, c.rows_present, c.intact) for c in check_pins(layout, names)] == [
        (n, check_dataset(layout, n).rows_present, check_dataset(layout, n).intact) for n in names
    ]
    assert all(c.intact for c in check_pins(layout, names))
    DeltaTable(layout.episodes).delete("episode_id = 'ep-001'")
    checks = check_pins(layout, names)
    assert [(c.pin.name, c.rows_present, c.intact) for c in checks] == [
        (n, check_dataset(layout, n).rows_present, check_dataset(layout, n).intact) for n in names
    ]
    assert [c.intact for c in checks] == [False, True]  # "ep1" lost its row; "picks" never had ep-001


def test_cli_refuses_an_open_host_without_a_token(
    ui_lake: UiLake, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from pi_jobs.cli import main
    from pi_jobs.ui import is_loopback, url_of

    monkeypatch.setenv("PILAKE_LAKE", ui_lake.layout.root)
    monkeypatch.setenv("PILAKE_CATALOG", ui_lake.catalog)
    assert main(["ui", "--host", "0.0.0.0", "--port", "0"]) == 1
    assert "pass --token" in capsys.readouterr().err
    loopback = {"127.0.0.1": True, "127.8.0.1": True, "::1": True, "localhost": True, "0.0.0.0": False}
    assert {h: is_loopback(h) for h in loopback} == loopback
    assert not is_loopback("10.0.0.2")
    token = "x" * 20
    assert url_of(_config(ui_lake, host="::", token=token, port=9)) == f"http://[::]:9/?token={token}"


def test_a_new_install_with_no_lake_yet(tmp_path: Path) -> None:
    config = UiConfig(
        lake_root=str(tmp_path / "lake"), catalog=str(tmp_path / "catalog"), cache_dir=tmp_path / "c"
    )
    with TestClient(create_app(config), base_url=LOCAL) as fresh:
        assert 'id="n-episodes">0<' in _ok(fresh, "/")
        assert "nothing to show" in _ok(fresh, "/quarantine")
        assert "no pins" in _ok(fresh, "/pins")
        assert fresh.get("/episode/ep-000").status_code == 404


@pytest.mark.parametrize("host", ["evil.example", "evil.example:8765", "192.168.1.5:8765", "testserver"])
def test_loopback_ui_refuses_other_host_headers(client: TestClient, host: str) -> None:
    # a DNS-rebinding page (its own name resolving to 127.0.0.1) must not read the lake
    response = client.get("/pins", headers={"Host": host})
    assert response.status_code == 400 and "not this machine's loopback address" in response.text
    for ok in ("127.0.0.1:8765", "localhost:8765", "[::1]:8765", "localhost"):
        assert client.get("/static/ui.js", headers={"Host": ok}).status_code == 200


def test_pages_never_show_catalog_credentials(ui_lake: UiLake) -> None:
    shown = UiConfig(lake_root="/l", catalog="https://reader:s3cret@ch.example:8443/db", cache_dir=Path("/c"))
    assert shown.catalog_shown == "https://ch.example:8443/db"
    assert _config(ui_lake).catalog_shown == ui_lake.catalog
