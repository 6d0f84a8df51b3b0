"""The Query page's SQL rule: one SELECT, no settings, run read-only with a time limit and a
row cap; refusals name what was wrong."""

from __future__ import annotations

import shlex

import pytest
from pi_catalog import Catalog, CatalogQueryError
from pi_jobs.ui import QueryRefused, check_select, run_select, wrap_select

from tests.jobs.ui.conftest import UiLake


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("SELECT episode_id FROM episodes", "SELECT episode_id FROM episodes"),
        ("  select 1;  ", "select 1"),
        ("WITH 2 AS k SELECT k ;;", "WITH 2 AS k SELECT k"),
        ("SELECT ';' AS semi, 'it''s' AS q -- a comment; DROP TABLE x", "SELECT ';' AS semi, 'it''s' AS q"),
        ("SELECT 1 /* settings; insert */ + 1", "SELECT 1 /* settings; insert */ + 1"),
        (
            "SELECT `SETTINGS` FROM (SELECT 1 AS `SETTINGS`)",
            "SELECT `SETTINGS` FROM (SELECT 1 AS `SETTINGS`)",
        ),
    ],
)
def test_check_select_accepts_one_select(sql: str, expected: str) -> None:
    assert check_select(sql) == expected


@pytest.mark.parametrize(
    ("sql", "match"),
    [
        ("INSERT INTO episodes_index SELECT * FROM episodes_index", "only SELECT queries run here.*'INSERT'"),
        ("DROP TABLE episodes_index", "only SELECT.*'DROP'"),
        ("SELECT 1; DROP TABLE episodes_index", "several statements"),
        ("SELECT 1;\nSELECT 2", "several statements"),
        ("SELECT count() FROM episodes SETTINGS readonly=0", "SETTINGS clause"),
        ("SELECT 1 settings readonly = 0", "SETTINGS clause"),
        ("SELECT * FROM (SELECT 1 SETTINGS readonly=0)", "SETTINGS clause"),
        ("SELECT 1 INTO OUTFILE '/tmp/x'", "INTO OUTFILE"),
        ("SELECT 1) UNION ALL (SELECT 2", "closes a parenthesis it never opened"),
        ("SELECT (1", "left.*open|leaves 1"),
        ("SELECT 'open", "unclosed ' quote"),
        ("SELECT 1 /* open", "unclosed /\\* comment"),
        ("", "empty"),
        ("   ;", "only SELECT"),
        ("ALTER TABLE episodes_index DELETE WHERE 1", "only SELECT.*'ALTER'"),
        ("SET readonly = 0", "only SELECT.*'SET'"),
    ],
)
def test_check_select_refuses(sql: str, match: str) -> None:
    with pytest.raises(QueryRefused, match=match):
        check_select(sql)


def test_wrap_puts_the_query_on_its_own_lines() -> None:
    wrapped = wrap_select("SELECT 1 -- trailing comment", limit=5, offset=10, timeout_s=2.5)
    assert wrapped.splitlines() == [
        "SELECT * FROM (",
        "SELECT 1 -- trailing comment",
        ") LIMIT 5 OFFSET 10 SETTINGS max_execution_time = 2.5, readonly = 1",
    ]
    with pytest.raises(ValueError, match="limit and offset must be >= 0"):
        wrap_select("SELECT 1", limit=-1, offset=0, timeout_s=1)


def test_run_select_pages_caps_and_stays_read_only(ui_lake: UiLake) -> None:
    catalog = Catalog(ui_lake.catalog)
    sql = "SELECT episode_id, task FROM episodes WHERE startsWith(episode_id, 'ep-0') ORDER BY episode_id"
    first = run_select(catalog, sql, page=0, page_size=2, row_cap=100, timeout_s=5)
    assert first.columns == ("episode_id", "task")
    assert [r[0] for r in first.rows] == ["ep-000", "ep-001"]
    assert first.total_rows == 3 and first.has_next and not first.capped
    second = run_select(catalog, sql, page=1, page_size=2, row_cap=100, timeout_s=5)
    assert [r[0] for r in second.rows] == ["ep-002"] and not second.has_next
    capped = run_select(catalog, sql, page=0, page_size=50, row_cap=2, timeout_s=5)
    assert len(capped.rows) == 2 and capped.capped and not capped.has_next
    with pytest.raises(QueryRefused, match="past the row cap"):
        run_select(catalog, sql, page=1, page_size=2, row_cap=2, timeout_s=5)
    # the command a shell splits back into exactly this SQL
    assert shlex.split(first.pin_command("mine") or "") == [
        "pilake",
        "dataset",
        "create",
        "mine",
        "--sql",
        sql,
    ]
    assert (
        run_select(catalog, "SELECT 1 AS x", page=0, page_size=5, row_cap=5, timeout_s=5).pin_command()
        is None
    )
    # ClickHouse itself, at readonly = 1: a table function that reads a file is refused
    with pytest.raises(CatalogQueryError, match="readonly"):
        run_select(
            catalog,
            "SELECT * FROM file('/etc/hostname', 'LineAsString')",
            page=0,
            page_size=5,
            row_cap=5,
            timeout_s=5,
        )
    # ... and the time limit holds
    with pytest.raises(CatalogQueryError, match=r"TIMEOUT_EXCEEDED|Timeout exceeded"):
        run_select(
            catalog, "SELECT sleepEachRow(0.5) FROM numbers(8)", page=0, page_size=5, row_cap=5, timeout_s=1
        )
    # the settings were the statement's, not the engine's: the same process can still write
    readonly = catalog.query_arrow("SELECT value FROM system.settings WHERE name = 'readonly'")
    assert readonly.column("value").to_pylist() == ["0"]
    catalog.ensure_schema()
    catalog.close()
