"""`Catalog.isolated_reader` on chdb: a handle of its own, read-only for good once set, beside
the engine's main client; and a process waiting for the path still gets its turn while the
readers' queries overlap without a pause (the count of users never reaching 0 would otherwise
keep the path from it)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from pi_catalog import Catalog, CatalogQueryError

REPO = Path(__file__).resolve().parents[2]
SETTINGS = {"max_execution_time": 1, "max_threads": 1, "readonly": 1}
# ~1 s of work each, ended by max_execution_time
BUSY = "SELECT count() FROM numbers(1000000000000) WHERE NOT ignore(sipHash64(number))"


def test_reader_is_read_only_and_leaves_the_engine_writable(tmp_path: Path) -> None:
    catalog = Catalog(str(tmp_path / "catalog"))
    catalog.ensure_schema()
    with catalog.isolated_reader(SETTINGS) as reader:
        assert reader.query_arrow("SELECT getSetting('readonly') AS r").column("r").to_pylist() == [1]
        with pytest.raises(CatalogQueryError, match=r"readonly|READONLY"):
            reader.query_arrow("SELECT 1 SETTINGS readonly = 0")
        assert reader.query_text("EXPLAIN AST SELECT 1").startswith("SelectWithUnionQuery")
    with pytest.raises(CatalogQueryError, match=r"readonly|READONLY"), catalog.isolated_reader(SETTINGS) as r:
        r.query_arrow("CREATE TABLE x (a Int8) ENGINE = Memory")
    assert catalog.query_arrow("SELECT getSetting('readonly') AS r").column("r").to_pylist() == [0]
    with pytest.raises(ValueError, match="lower-case words"), catalog.isolated_reader({"max-threads": 1}):
        pass
    catalog.close()


_WAITER = (
    "import sys; from pi_catalog import Catalog; "
    "print(Catalog(sys.argv[1]).query_arrow('SELECT 7 AS n')['n'][0])"
)


@pytest.mark.integration
def test_a_waiting_process_gets_its_turn_while_readers_overlap(tmp_path: Path) -> None:
    path = str(tmp_path / "catalog")
    catalog = Catalog(path)
    catalog.ensure_schema()
    stop = threading.Event()
    order: list[str] = []

    def reader_loop() -> None:
        while not stop.is_set():
            try:
                with catalog.isolated_reader(SETTINGS) as reader:
                    reader.query_arrow(BUSY)
            except CatalogQueryError:
                pass  # the time limit
        order.append("readers stopped")

    threads = [threading.Thread(target=reader_loop) for _ in range(2)]
    for thread in threads:
        thread.start()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    try:
        out = subprocess.run(
            [sys.executable, "-c", _WAITER, path],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        order.append("waiter done")
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=60)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == "7"
    assert order[0] == "waiter done", order  # it got the path while the readers still ran
    with catalog.isolated_reader(SETTINGS) as reader:  # and they get it back
        assert reader.query_arrow("SELECT 1 AS x").column("x").to_pylist() == [1]
    catalog.close()
