"""The Query page's classification of the engine's functions is complete: every function and
table function of the chdb in use is either pure (pi_jobs.ui._function_names) or refused with a
reason (pi_jobs.ui._functions). When an upgrade adds one, this fails: look it up in
ClickHouse's docs, add it to REFUSED / REFUSED_TABLE_FUNCTIONS when it reads files, the network,
another data source or the server's state, then regenerate the pure list with
`python -m pi_jobs.ui._functions`."""

from __future__ import annotations

import json

import pytest
from pi_jobs.ui._function_names import PURE
from pi_jobs.ui._functions import ALLOWED_TABLE_FUNCTIONS, REFUSED, REFUSED_TABLE_FUNCTIONS, SYNTAX_FUNCTIONS


@pytest.fixture(scope="module")
def engine() -> dict[str, dict[str, str]]:
    # a process of its own: the test process may hold an on-disk chdb engine (no plain query())
    import subprocess
    import sys

    code = (
        "import json, chdb\n"
        "q = lambda s: json.loads(str(chdb.query(s, 'JSONCompact')))['data']\n"
        "print(json.dumps({'functions': dict(q('SELECT name, alias_to FROM system.functions')),"
        " 'tables': dict(q(\"SELECT name, '' FROM system.table_functions\"))}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=120
    )
    data: dict[str, dict[str, str]] = json.loads(out.stdout)
    return data


def test_every_function_of_the_engine_is_classified(engine: dict[str, dict[str, str]]) -> None:
    refused = {n.lower() for n in REFUSED}
    unclassified = sorted(
        name
        for name, alias in engine["functions"].items()
        if name not in PURE and name.lower() not in refused and alias.lower() not in refused
    )
    assert not unclassified, f"functions new to the engine, classify them: {unclassified}"
    # no refused name (or an alias of one) hides in the pure list
    assert not {n for n in PURE if n.lower() in refused}
    assert not {n for n in PURE if engine["functions"].get(n, "").lower() in refused}
    # what is classified exists (a typo would leave the real name unclassified)
    assert not {n for n in REFUSED if n not in engine["functions"]}
    assert not SYNTAX_FUNCTIONS & set(engine["functions"])


def test_every_table_function_of_the_engine_is_classified(engine: dict[str, dict[str, str]]) -> None:
    tables = set(engine["tables"])
    assert tables == set(REFUSED_TABLE_FUNCTIONS) | ALLOWED_TABLE_FUNCTIONS, (
        "table functions new to the engine (or gone): "
        f"{sorted(tables ^ (set(REFUSED_TABLE_FUNCTIONS) | ALLOWED_TABLE_FUNCTIONS))}"
    )
    assert not ALLOWED_TABLE_FUNCTIONS & set(REFUSED_TABLE_FUNCTIONS)


@pytest.mark.parametrize(
    "name",
    ["file", "getSetting", "getServerSetting", "currentUser", "hostName", "dictGet", "joinGet", "version",
     "filesystemAvailable", "sleep", "addressToSymbol", "aiGenerate", "getMacro", "globalVariable",
     "currentDatabase", "serverUUID", "getClientHTTPHeader"],
)  # fmt: skip
def test_the_functions_that_reach_out_are_refused(name: str) -> None:
    assert name in REFUSED and name not in PURE


@pytest.mark.parametrize(
    "name",
    ["file", "url", "s3", "executable", "input", "remote", "mysql", "postgresql", "hdfs", "azureBlobStorage",
     "deltaLake", "deltaLakeLocal", "iceberg", "icebergLocal", "hudi", "jdbc", "odbc", "sqlite", "python",
     "dictionary", "merge", "cluster", "view", "loop", "filesystem", "eval", "arrowstream"],
)  # fmt: skip
def test_the_table_functions_that_reach_out_are_refused(name: str) -> None:
    assert name in REFUSED_TABLE_FUNCTIONS and name not in ALLOWED_TABLE_FUNCTIONS
