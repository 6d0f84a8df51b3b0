"""The embedded catalog over many calls: open descriptors and part directories stay bounded,
and a process that holds the engine hands it to another that waits."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pytest
from pi_catalog import Catalog, _parts

from tests.fixtures.lake_factory import episode_rows, make_episode

REPO = Path(__file__).resolve().parents[2]


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _part_dirs(catalog_dir: Path) -> int:
    """Part directories of the catalog's MergeTree tables on disk (any state)."""
    count = 0
    for table_dir in catalog_dir.glob("store/*/*"):
        if (table_dir / "format_version.txt").exists():
            count += sum(1 for p in table_dir.iterdir() if p.is_dir() and p.name != "detached")
    return count


@pytest.fixture(scope="module")
def template() -> pa.Table:
    return episode_rows([make_episode(0, steps=2, cameras=["cam"], size=(16, 16), seed=0)])


def _renamed(template: pa.Table, i: int) -> pa.Table:
    ids = pa.array([f"ep-{i:06d}"])
    return template.set_column(template.schema.get_field_index("episode_id"), "episode_id", ids)


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts descriptors in /proc")
def test_open_descriptors_stay_flat_over_hundreds_of_calls(tmp_path: Path, template: pa.Table) -> None:
    catalog = Catalog(str(tmp_path / "catalog"))
    catalog.ensure_schema()
    catalog.record_episodes(_renamed(template, 0), episodes_version=0)
    catalog.query_arrow("SELECT count() FROM episodes")
    before = _open_fds()
    for i in range(300):  # each call was a cold open/close of chdb that leaked ~8-12 fds
        if i % 3 == 0:
            catalog.record_episodes(_renamed(template, i), episodes_version=i)
        elif i % 3 == 1:
            catalog.query_arrow("SELECT count() AS n FROM episodes WHERE step_count > {n:Int32}", {"n": 0})
        else:
            Catalog(str(tmp_path / "catalog")).ensure_schema()  # a fresh Catalog object, same path
    grown = _open_fds() - before
    assert grown <= 24, f"{grown} more open file descriptors after 300 catalog calls"
    assert catalog.query_arrow("SELECT count() AS n FROM episodes").column("n")[0].as_py() == 100


def test_part_directories_stay_bounded_over_many_small_groups(
    tmp_path: Path, template: pa.Table, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_parts, "MAX_PARTS", 48)
    catalog_dir = tmp_path / "catalog"
    catalog = Catalog(str(catalog_dir))
    # One part per insert: without merges and cleanup (or with an engine per call) the table
    # held >= 1 directory per group, ~1.2 per group measured.
    groups, worst = 200, 0
    for i in range(groups):
        catalog.record_episodes(_renamed(template, i), episodes_version=i)
        if i % 16 == 15:  # right after the writer's own check, when the count peaks
            worst = max(worst, _part_dirs(catalog_dir))
    parts = catalog.query_arrow(
        "SELECT countIf(active) AS n_active, count() AS n_all FROM system.parts "
        "WHERE database = currentDatabase() AND table = 'episodes_index'"
    ).to_pylist()[0]
    # system.parts: MAX_PARTS plus the inserts between two checks (and slack); on disk also the
    # directories being removed. The old engine-per-call catalog held ~1.2 per group here (~240).
    assert parts["n_all"] <= 48 + 16 + 16, parts
    assert parts["n_active"] <= 48, parts
    assert worst <= 128, f"{worst} part directories on disk after {groups} groups"
    assert len(catalog.episode_ids("SELECT episode_id FROM episodes")) == groups


_WAITER = textwrap.dedent(
    """
    import sys
    from pi_catalog import Catalog

    cat = Catalog(sys.argv[1], lock_timeout_s=60)
    print(cat.query_arrow("SELECT count() AS n FROM episodes").column("n")[0].as_py())
    """
)


@pytest.mark.integration
def test_an_idle_holder_hands_the_path_to_a_waiting_process(tmp_path: Path, template: pa.Table) -> None:
    path = str(tmp_path / "catalog")
    catalog = Catalog(path)
    catalog.record_episodes(_renamed(template, 1), episodes_version=0)  # holds engine and lock now
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run(
        [sys.executable, "-c", _WAITER, path], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == "1"
    catalog.record_episodes(_renamed(template, 2), episodes_version=1)  # waits its turn, reopens
    assert catalog.episode_ids("SELECT episode_id FROM episodes ORDER BY 1") == ["ep-000001", "ep-000002"]
