"""The Query page's SQL rule: one SELECT, no settings, run read-only with a time limit and a
row cap; refusals name what was wrong."""

from __future__ import annotations

import shlex

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pi_catalog import Catalog, CatalogQueryError
from pi_jobs.ui import (
    EngineFunctions,
    QueryRefused,
    QueryResult,
    UiConfig,
    check_select,
    query_settings,
    run_select,
    wrap_select,
)

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


def test_check_select_keeps_a_final_literal() -> None:
    # the literal was blanked, then cut off as trailing space: a syntax error (issue 31)
    sql = "SELECT * FROM episodes WHERE robot_id = 'sim7-r000'"
    assert check_select(sql) == sql
    assert check_select(sql + " ;; -- note") == sql
    assert check_select("SELECT 1 AS `x y`") == "SELECT 1 AS `x y`"


def test_wrap_puts_the_query_on_its_own_lines() -> None:
    wrapped = wrap_select("SELECT 1 -- trailing comment", limit=5, offset=10)
    assert wrapped.splitlines() == ["SELECT * FROM (", "SELECT 1 -- trailing comment", ") LIMIT 5 OFFSET 10"]
    with pytest.raises(ValueError, match="limit and offset must be >= 0"):
        wrap_select("SELECT 1", limit=-1, offset=0)


def _config(ui_lake: UiLake, **kwargs: object) -> UiConfig:
    return UiConfig(
        lake_root=ui_lake.layout.root,
        catalog=ui_lake.catalog,
        cache_dir=ui_lake.cache,
        **kwargs,  # type: ignore[arg-type]
    )


def test_run_select_pages_caps_and_stays_read_only(ui_lake: UiLake) -> None:
    catalog = Catalog(ui_lake.catalog)
    settings = query_settings(_config(ui_lake, query_timeout_s=1.0))

    def run(sql: str, *, page: int = 0, page_size: int = 2, row_cap: int = 100) -> QueryResult:
        with catalog.isolated_reader(settings) as reader:
            functions = EngineFunctions.read(reader)
            return run_select(
                reader, sql, functions=functions, page=page, page_size=page_size, row_cap=row_cap
            )

    sql = "SELECT episode_id, task FROM episodes WHERE startsWith(episode_id, 'ep-0') ORDER BY episode_id"
    first = run(sql)
    assert first.columns == ("episode_id", "task")
    assert [r[0] for r in first.rows] == ["ep-000", "ep-001"]
    assert first.total_rows == 3 and first.has_next and not first.capped
    second = run(sql, page=1)
    assert [r[0] for r in second.rows] == ["ep-002"] and not second.has_next
    capped = run(sql, page_size=50, row_cap=2)
    assert len(capped.rows) == 2 and capped.capped and not capped.has_next
    with pytest.raises(QueryRefused, match="past the row cap"):
        run(sql, page=1, row_cap=2)
    # the command a shell splits back into exactly this SQL
    assert shlex.split(first.pin_command("mine") or "") == [
        "pilake",
        "dataset",
        "create",
        "mine",
        "--sql",
        sql,
    ]
    assert run("SELECT 1 AS x").pin_command() is None
    # a table function that reads a file is refused before ClickHouse runs anything
    with pytest.raises(QueryRefused, match="table function 'file' reads the filesystem"):
        run("SELECT * FROM file('/etc/hostname', 'LineAsString')")
    # the time limit is the reader's: a long query stops (numbers, not sleep: sleep is refused)
    with pytest.raises(CatalogQueryError, match=r"TIMEOUT_EXCEEDED|Timeout exceeded"):
        run("SELECT count() FROM numbers(1e12) WHERE NOT ignore(sipHash64(number))")
    # ... and the next query on the same catalog works (a failed handle is dropped, not reused)
    assert run("SELECT 2 AS x").rows == (("2",),)
    # the settings were the reader's, not the engine's: the same process can still write
    readonly = catalog.query_arrow("SELECT value FROM system.settings WHERE name = 'readonly'")
    assert readonly.column("value").to_pylist() == ["0"]
    catalog.ensure_schema()
    catalog.close()


@given(st.text(max_size=300))
@settings(max_examples=300, deadline=None)
def test_check_select_takes_any_text_and_refuses_or_keeps_it(text: str) -> None:
    try:
        checked = check_select(text)
    except QueryRefused:
        return
    assert checked == checked.strip() and checked in text  # a cut of the text, nothing added


@given(st.text(alphabet=st.characters(codec="utf-8", exclude_characters="'\\"), max_size=40))
def test_a_query_ending_in_any_literal_keeps_it(value: str) -> None:
    sql = f"SELECT episode_id FROM episodes WHERE robot_id = '{value}'"
    assert check_select(sql) == sql
    assert check_select(sql + " ; -- trailing") == sql
