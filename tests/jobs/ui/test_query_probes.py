"""The Query page reads the catalog and nothing else, through the real app (starlette's
TestClient) on the real chdb catalog: the tester's probes of issue 31 (files, the process's
environment and argv, relative paths, whether a path exists), a seeded generator of quoting,
comment, case and nesting tricks around every function and table function that reaches out,
system tables, SETTINGS / FORMAT / INTO OUTFILE / a second statement; each refused with a clear
message that never depends on the path, and a good query beside them still answered. Then the
limits: a memory-hungry query stops at the page's memory limit, and heavy queries neither block
the other pages nor run more than `max_running_queries` at once (no timing asserted: the
figures are benchmarks/ui/sql_load.py's)."""

from __future__ import annotations

import random
import re
import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest
from pi_jobs.ui import UiConfig, create_app
from starlette.testclient import TestClient

from tests.jobs.ui.conftest import UiLake

LOCAL = "http://127.0.0.1:8765"
GOOD = "SELECT count() AS n FROM episodes WHERE task != 'nope'"


def _config(ui_lake: UiLake, **kwargs: object) -> UiConfig:
    return UiConfig(
        lake_root=ui_lake.layout.root,
        catalog=ui_lake.catalog,
        cache_dir=ui_lake.cache,
        **kwargs,  # type: ignore[arg-type]
    )


@pytest.fixture(scope="module")
def client(ui_lake: UiLake) -> Iterator[TestClient]:
    app = create_app(_config(ui_lake, query_memory_bytes=200 * 1024**2, query_timeout_s=5.0))
    with TestClient(app, base_url=LOCAL) as test_client:
        yield test_client


def _query(client: TestClient, sql: str) -> Any:
    return client.get("/query?sql=" + quote(sql))


def _error(response: Any) -> str:
    match = re.search(r'id="query-error">(.*?)<', response.text, re.S)
    return match.group(1) if match else ""


def _refused(client: TestClient, sql: str) -> str:
    response = _query(client, sql)
    error = _error(response)
    assert response.status_code == 400, (sql, response.status_code, response.text[-800:])
    assert error.startswith("refused:"), (sql, error)
    # nothing of a file, the environment or argv, and no word on whether a path exists
    shown = response.text.split("<main>", 1)[-1]  # the header names the lake's path
    for leak in ("root:x:", "PATH=", "pytest", "FILE_DOESNT_EXIST", "No such file", "Permission denied"):
        assert leak not in shown, (sql, leak)
    return error


def _good(client: TestClient) -> None:
    response = _query(client, GOOD)
    assert response.status_code == 200, response.text[-800:]
    assert "<td>4</td>" in response.text  # 3 lake episodes + the catalog-only row


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT file('/etc/passwd')",
        "SELECT arrayJoin(splitByChar(char(0), file('/proc/self/environ')))",
        "SELECT file('/proc/self/cmdline')",
        "SELECT file('catalog.lock')",  # relative paths
        "SELECT file('../../etc/passwd')",
        "SELECT * FROM file('/etc/passwd', 'LineAsString')",
        "SELECT * FROM url('http://127.0.0.1:9/x', 'CSV', 'a String')",
        "SELECT * FROM executable('id', 'TSV', 'a String')",
        "SELECT * FROM system.processes",
        "SELECT name, value FROM system.settings",
        "SELECT * FROM system.functions",
        "SELECT getSetting('max_memory_usage')",
        "SELECT currentUser(), hostName(), version()",
        "SELECT * FROM information_schema.tables",
        "SELECT * FROM python(x)",
        "SELECT * FROM deltaLakeLocal('/tmp')",
        # a bare name is a call where a function of that name takes no arguments
        "SELECT USER",
        "SELECT CURRENT_DATABASE AS d",
        "SELECT episode_id FROM episodes WHERE session_user != ''",
        "SELECT currentRequestURL",
        # APPLY hides the function (and a lambda's body) from the parsed form
        "SELECT * APPLY(file) FROM (SELECT '/etc/passwd' AS p)",
        "SELECT COLUMNS('p') APPLY(x -> file(x)) FROM (SELECT '/etc/passwd' AS p)",
        "SELECT * FROM (EXPLAIN AST SELECT file('/etc/passwd'))",
    ],
)
def test_the_testers_probes_are_refused(client: TestClient, sql: str) -> None:
    _refused(client, sql)
    _good(client)


def test_a_name_outside_the_catalog_is_no_table(client: TestClient) -> None:
    # chdb can read Python objects as tables (the `python` table function, refused); a bare
    # name must not reach the process's variables either: it is an unknown table
    for name in ("os", "environ", "sys", "config", "environment", "token"):
        response = _query(client, f"SELECT * FROM {name}")
        assert response.status_code == 400 and "UNKNOWN_TABLE" in _error(response), name
        assert "PATH=" not in response.text
    _good(client)


def test_a_missing_path_and_a_present_one_read_the_same(client: TestClient) -> None:
    present = _refused(client, "SELECT file('/etc/passwd') AS x")
    missing = _refused(client, "SELECT file('/no/such/dir/passwd') AS x")
    assert present == missing
    assert "reads the filesystem" in present


def test_a_query_ending_in_a_literal_runs(client: TestClient) -> None:
    response = _query(client, "SELECT episode_id FROM episodes WHERE episode_id = 'ep-001'")
    assert response.status_code == 200, _error(response)
    assert ">ep-001</a>" in response.text


# -- generated tricks ---------------------------------------------------------------------------

_SCALARS = ("file", "getSetting", "getServerSetting", "currentUser", "hostName", "dictGet", "joinGet",
            "filesystemAvailable", "version", "uptime", "getMacro", "sleep", "addressToSymbol", "user",
            "DATABASE", "FQDN", "globalVariable", "serverUUID", "initialQueryID", "aiGenerate")  # fmt: skip
_TABLES = ("file", "url", "s3", "executable", "input", "remote", "mysql", "postgresql", "hdfs",
           "azureBlobStorage", "deltaLake", "deltaLakeLocal", "iceberg", "icebergLocal", "hudi", "jdbc",
           "odbc", "sqlite", "python", "dictionary", "merge", "cluster", "view", "loop", "filesystem",
           "mergeTreeIndex", "generateRandom", "format", "eval")  # fmt: skip
_SYSTEM = ("system.processes", "system.settings", "system.functions", "system.tables", "system.users",
           "system.query_log", "system.server_settings", "system.build_options", "system.disks",
           "information_schema.tables", "INFORMATION_SCHEMA.COLUMNS")  # fmt: skip
_BARE = (
    "USER",
    "current_user",
    "CURRENT_DATABASE",
    "DATABASE",
    "SCHEMA",
    "session_user",
    "currentRequestURL",
)
_GAPS = ("", " ", "/**/", "/* x */ ", "\n", "\t", " -- c\n", "\r\n", "\u00a0", "\u2028", "\ufeff")
_SUFFIXES = (" SETTINGS readonly = 0", " SETTINGS max_memory_usage = 0", "; DROP TABLE episodes_index",
             " INTO OUTFILE '/tmp/pilake-ui-probe'", " FORMAT JSON", ";SELECT 1",
             " settings\nreadonly=0")  # fmt: skip


def _case(rng: random.Random, name: str) -> str:
    return "".join(c.upper() if rng.random() < 0.5 else c.lower() for c in name)


def _spell(rng: random.Random, name: str) -> str:
    kind = rng.randrange(6)
    if kind == 5:  # a homoglyph (Cyrillic і / о) or a full-width letter in place of a Latin one
        return name.replace("i", "\u0456", 1).replace("o", "\u043e", 1).replace("e", "\uff45", 1)
    if kind == 0:
        return f"`{name}`"
    if kind == 1:
        return f'"{name}"'
    if kind == 2:
        return _case(rng, name)
    return name


def _call(rng: random.Random, name: str) -> str:
    args = rng.choice(["'/etc/passwd'", "'/proc/self/environ'", "'x'", "'a', 'b', 1", ""])
    return f"{_spell(rng, name)}{rng.choice(_GAPS)}({args})"


def _nest(rng: random.Random, expr: str) -> str:
    forms = [
        "SELECT {e}",
        "SELECT {e} AS x FROM episodes",
        "SELECT * FROM (SELECT {e} AS x)",
        "WITH t AS (SELECT {e} AS x) SELECT * FROM t",
        "WITH {e} AS k SELECT k",
        "SELECT arrayMap(y -> {e}, [1])",
        "SELECT episode_id FROM episodes WHERE {e} != ''",
        "SELECT episode_id FROM episodes ORDER BY {e}",
        "SELECT (SELECT {e})",
        "SELECT 1 UNION ALL SELECT {e}",
        "SELECT count() FROM episodes AS a JOIN episodes AS b ON a.episode_id = b.episode_id AND {e} = ''",
        "SELECT max({e}) OVER (PARTITION BY task) FROM episodes",
        "SELECT 1 WHERE 1 IN (SELECT {e})",
        "SELECT * REPLACE ({e} AS p) FROM (SELECT 'x' AS p)",
    ]
    return rng.choice(forms).format(e=expr)


def _from(rng: random.Random, source: str) -> str:
    forms = [
        "SELECT * FROM {s}",
        "SELECT * FROM (SELECT * FROM {s})",
        "WITH t AS (SELECT * FROM {s}) SELECT * FROM t",
        "SELECT count() FROM episodes JOIN {s} AS z ON 1",
        "SELECT 1 WHERE 1 IN (SELECT 1 FROM {s})",
        "SELECT 1 UNION ALL SELECT * FROM {s}",
    ]
    return rng.choice(forms).format(s=source)


def _table_name(rng: random.Random, qualified: str) -> str:
    db, table = qualified.split(".")
    return rng.choice(
        [qualified, f"`{db}`.`{table}`", f'"{db}"."{table}"', f"{db} . {table}", f"{db}/**/.{table}"]
    )


def tricks(seed: int, n: int) -> list[str]:
    """`n` hostile queries, reproducible by seed."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        kind = rng.randrange(5)
        if kind == 4:  # a call without parentheses
            name = rng.choice(_BARE)
            sql = _nest(rng, rng.choice([name, f"`{name}`"]))
        elif kind == 0:
            sql = _nest(rng, _call(rng, rng.choice(_SCALARS)))
        elif kind == 1:
            sql = _from(rng, _call(rng, rng.choice(_TABLES)))
        elif kind == 2:
            sql = _from(rng, _table_name(rng, rng.choice(_SYSTEM)))
        else:
            sql = rng.choice(["SELECT count() FROM episodes", GOOD, "SELECT 1"]) + rng.choice(_SUFFIXES)
        out.append(sql)
    return out


@pytest.mark.parametrize("seed", range(4))
def test_generated_tricks_are_refused_and_the_good_query_still_runs(client: TestClient, seed: int) -> None:
    for index, sql in enumerate(tricks(seed, 60)):
        _refused(client, sql)
        if index % 10 == 0:
            _good(client)
    _good(client)


# -- limits -------------------------------------------------------------------------------------


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        import os

        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_a_memory_hungry_query_stops_at_the_limit(client: TestClient) -> None:
    before = _rss_bytes()
    response = _query(client, "SELECT length(groupArray(number)) FROM numbers(100000000)")
    assert response.status_code == 400
    assert re.search(r"MEMORY_LIMIT_EXCEEDED|memory limit", _error(response)), _error(response)
    # the limit is 200 MiB here; without it this query took the UI from 0.7 to 2.56 GB
    assert _rss_bytes() - before < 1024**3
    _good(client)


HEAVY = "SELECT count() FROM numbers(1000000000000) WHERE NOT ignore(sipHash64(number))"


def test_heavy_queries_neither_block_the_pages_nor_exceed_the_bound(ui_lake: UiLake) -> None:
    app = create_app(
        _config(ui_lake, query_timeout_s=4.0, max_running_queries=2, max_waiting_queries=1, query_wait_s=60.0)
    )
    gate = app.pages.sql.gate
    events: list[tuple[str, int]] = []
    lock = threading.Lock()

    def note(what: str, status: int) -> None:
        with lock:
            events.append((what, status))

    with TestClient(app, base_url=LOCAL) as client:
        _good(client)  # the engine and its function list are loaded
        heavy = [
            threading.Thread(target=lambda: note("heavy", _query(client, HEAVY).status_code))
            for _ in range(4)
        ]
        for thread in heavy:
            thread.start()
        while gate.running < 2:  # both slots taken (the 3rd waits, the 4th is refused)
            threading.Event().wait(0.01)
        for url in ("/", "/quarantine", "/pins", "/episode/ep-001"):
            note(url, client.get(url).status_code)
        note("good-sql-while-busy", _query(client, "SELECT 1 AS x").status_code)
        for thread in heavy:
            thread.join(timeout=120)
    pages = [e for e in events if e[0].startswith("/")]
    first_heavy_done = min(i for i, e in enumerate(events) if e[0] == "heavy" and e[1] != 503)
    # the other pages answered, and before any heavy query finished (they did not wait for one)
    assert all(status == 200 for _, status in pages), events
    assert all(events.index(p) < first_heavy_done for p in pages), events
    heavy_status = sorted(s for w, s in events if w == "heavy")
    # 2 ran to their time limit (400, ClickHouse's timeout), 1 waited and ran, 1 more found
    # the queue full (503); the good query also found it full
    assert heavy_status.count(503) >= 1 and heavy_status.count(400) >= 2, events
    assert gate.most_running <= 2
    assert ("good-sql-while-busy", 503) in events


def test_http_parameters_are_bounded(client: TestClient) -> None:
    too_long = "SELECT 1 AS x" + " " * 20_000
    response = _query(client, too_long)
    assert response.status_code == 400 and "characters, more than the 20000" in _error(response)
    # a page past the cap, a huge or malformed page number: a clear answer, no work
    for page in ("999999999999999999999999", "-5", "abc", "1e9"):
        response = client.get(f"/query?page={page}&sql=" + quote(GOOD))
        assert response.status_code in (200, 400), (page, response.status_code)
    response = client.get("/query?page=1000000&sql=" + quote(GOOD))
    assert response.status_code == 400 and "past the row cap" in _error(response)
    for url in ("/quarantine?page=99999999999999999999", "/pins?page=-1", "/quarantine?page=%00"):
        assert client.get(url).status_code == 200, url
    long_id = "e" * 5000
    for url in (f"/episode/{long_id}", f"/episode/ep-001/video/{long_id}", f"/episode/{long_id}/video/front"):
        response = client.get(url)
        assert response.status_code == 404 and "5000 characters" in response.text, url
    _good(client)
