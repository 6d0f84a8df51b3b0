"""The Query page on a server catalog (clickhouse-connect over HTTP) screens and bounds queries
as on the embedded one. No ClickHouse server installs here (Debian's is from 2018): the server
is the HTTP TEST DOUBLE of tests/fixtures/clickhouse_http_double.py (ClickHouse's HTTP protocol
in front of a real chdb engine), so what is checked is the UI's side — the screen runs the
server's own `EXPLAIN AST` and function list, every request carries the limits and readonly = 1
— not a server's users and profiles (deploy/k8s/clickhouse.yaml gives the UI a read-only user)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pi_catalog import Catalog
from pi_catalog._connection import PASSWORD_ENV, USER_ENV
from pi_jobs.ui import UiConfig, create_app
from starlette.testclient import TestClient

from tests.fixtures.clickhouse_http_double import chdb_http_server
from tests.jobs.ui.conftest import UiLake
from tests.jobs.ui.test_query_probes import LOCAL, _error, _good, _query, _refused, tricks

USER = "pilake"
PASSWORD = "pw-ui-Zq81-never-echoed"


@pytest.fixture(scope="module")
def client(ui_lake: UiLake, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    with (
        pytest.MonkeyPatch.context() as env,
        chdb_http_server(
            str(tmp_path_factory.mktemp("ui-server") / "data"), user=USER, password=PASSWORD
        ) as s,
    ):
        env.setenv(USER_ENV, USER)
        env.setenv(PASSWORD_ENV, PASSWORD)
        url = f"{s.url}/pilake"
        Catalog(url).rebuild(ui_lake.layout)
        config = UiConfig(
            lake_root=ui_lake.layout.root,
            catalog=url,
            cache_dir=ui_lake.cache,
            query_memory_bytes=200 * 1024**2,
            query_timeout_s=5.0,
        )
        with TestClient(create_app(config), base_url=LOCAL) as test_client:
            yield test_client


def test_good_queries_run_on_the_server(client: TestClient) -> None:
    response = _query(client, "SELECT episode_id FROM episodes WHERE episode_id = 'ep-001'")
    assert response.status_code == 200, _error(response)
    assert ">ep-001</a>" in response.text
    response = _query(client, "SELECT count() AS n FROM episodes WHERE task != 'nope'")
    assert response.status_code == 200 and "<td>3</td>" in response.text, _error(response)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT file('/etc/passwd')",
        "SELECT arrayJoin(splitByChar(char(0), file('/proc/self/environ')))",
        "SELECT * FROM url('http://127.0.0.1:9/x', 'CSV', 'a String')",
        "SELECT * FROM system.processes",
        "SELECT getSetting('readonly')",
        "SELECT 1 SETTINGS readonly = 0",
    ],
)
def test_probes_are_refused_on_the_server(client: TestClient, sql: str) -> None:
    error = _refused(client, sql)
    assert PASSWORD not in error


def test_generated_tricks_are_refused_on_the_server(client: TestClient) -> None:
    for sql in tricks(101, 40):
        _refused(client, sql)
    response = _query(client, "SELECT count() AS n FROM episodes")
    assert response.status_code == 200, _error(response)


def test_the_limits_travel_with_every_request(client: TestClient) -> None:
    response = _query(client, "SELECT length(groupArray(number)) FROM numbers(100000000)")
    assert response.status_code == 400
    assert "MEMORY_LIMIT_EXCEEDED" in _error(response) or "memory limit" in _error(response)


_ = _good  # shared helper of the embedded tests (its row count differs here)


def test_user_sql_runs_as_the_ui_user_where_one_is_set(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the double has one user: a wrong password for the UI's user shows that users' SQL (and only
    # it) connects as PILAKE_UI_CLICKHOUSE_USER, while the Overview reads as PILAKE_CLICKHOUSE_USER
    monkeypatch.setenv("PILAKE_UI_CLICKHOUSE_USER", USER)
    monkeypatch.setenv("PILAKE_UI_CLICKHOUSE_PASSWORD", "wrong-" + PASSWORD)
    response = _query(client, "SELECT 1 AS x")
    assert response.status_code == 500
    assert "PILAKE_UI_CLICKHOUSE_PASSWORD" in response.text and PASSWORD not in response.text
    assert client.get("/").status_code == 200
    monkeypatch.setenv("PILAKE_UI_CLICKHOUSE_PASSWORD", PASSWORD)
    assert _query(client, "SELECT 1 AS x").status_code == 200
