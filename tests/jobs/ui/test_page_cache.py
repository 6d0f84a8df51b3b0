"""The operator pages' kept results (pi_jobs.ui._page_cache, pi_jobs.ops._file_index) are
keyed by what they were computed from: a commit, a new pin or a new raw file is seen on the
next request, and what is served from the cache equals what a fresh read computes."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pyarrow as pa
import pytest
from pi_format import QUARANTINE_SCHEMA, RAW_SCHEMA, LakeLayout

from tests.jobs.ui.conftest import UiLake


@pytest.fixture
def layout(ui_lake: UiLake, tmp_path: Path) -> LakeLayout:
    from pi_jobs.ops import _file_index
    from pi_jobs.ui import _page_cache

    _page_cache.clear()
    _file_index.clear()
    shutil.copytree(ui_lake.layout.root, tmp_path / "lake")
    return LakeLayout(str(tmp_path / "lake"))


def _quarantine_row(layout: LakeLayout, n: int, message: bytes) -> None:
    from deltalake import write_deltalake

    now = time.time_ns()
    raw = {
        "episode_id": f"ep-q{n}",
        "chunk_index": 0,
        "kafka_topic": "episodes.raw.v1",
        "kafka_partition": 0,
        "kafka_offset": 100 + n,
        "received_at_ns": now,
        "attempt_id": f"att-q{n}",
        "message": message,
    }
    row = {
        "quarantine_id": f"q-new-{n}",
        "episode_id": f"ep-q{n}",
        "reason": "bad_magic",
        "details": "new",
        "kafka_topic": "episodes.raw.v1",
        "kafka_partition": 0,
        "kafka_offsets": [100 + n],
        "raw_pointer": f"att-q{n}:0:{100 + n}",
        "size_bytes": len(message),
        "attempt_id": f"att-q{n}",
        "quarantined_at_ns": now,
    }
    write_deltalake(layout.raw, pa.Table.from_pylist([raw], schema=RAW_SCHEMA), mode="append")
    write_deltalake(layout.quarantine, pa.Table.from_pylist([row], schema=QUARANTINE_SCHEMA), mode="append")


def test_quarantine_page_sees_a_new_row_and_its_raw_message(layout: LakeLayout) -> None:
    from pi_jobs.ops.quarantine import list_quarantine
    from pi_jobs.ui._ops import quarantine_page

    first, total = quarantine_page(layout, page=0, page_size=50, include_closed=False)
    assert total == 1 and first[0].preview[0]["hex"].startswith("50 49 45 50 01")
    again, _ = quarantine_page(layout, page=0, page_size=50, include_closed=False)
    assert again == first  # served from the cache, the same rows
    for n in range(2):  # a commit to raw and quarantine each: new versions, a new raw file
        _quarantine_row(layout, n, bytes([0xAB, n]) * 30)
        rows, total = quarantine_page(layout, page=0, page_size=50, include_closed=False)
        assert total == 2 + n == len(list_quarantine(layout))
        assert rows[0].quarantine_id == f"q-new-{n}"  # newest first
        assert rows[0].preview[0]["hex"].startswith(f"ab {n:02x} ab {n:02x}")
        assert rows[-1].preview == first[0].preview


def test_pin_checks_follow_the_episodes_version_and_new_pins(
    layout: LakeLayout, monkeypatch: pytest.MonkeyPatch
) -> None:
    from deltalake import DeltaTable
    from pi_jobs.maintenance.datasets import check_dataset, create_dataset
    from pi_jobs.ui import _ops

    rows, total = _ops.pins_page(layout, page=0, page_size=50)
    assert total == 1 and rows[0].intact
    hashed: list[int] = []
    real = _ops.fast_content_hash

    def counted(rows: pa.Table) -> str:
        hashed.append(1)
        return real(rows)

    monkeypatch.setattr(_ops, "fast_content_hash", counted)
    assert _ops.pins_page(layout, page=0, page_size=50)[0] == rows
    assert hashed == []  # nothing changed: the kept check, no rows hashed again
    create_dataset(layout, "ep1", episode_ids=["ep-001"])
    rows, total = _ops.pins_page(layout, page=0, page_size=50)
    assert total == 2 and [r.name for r in rows] == ["ep1", "picks"] and all(r.intact for r in rows)
    assert hashed == [1]  # only the new pin was hashed
    DeltaTable(layout.episodes).delete("episode_id = 'ep-001'")  # a new episodes version
    rows, _ = _ops.pins_page(layout, page=0, page_size=50)
    assert [(r.name, r.intact) for r in rows] == [("ep1", False), ("picks", True)]
    assert [r.rows_present for r in rows] == [check_dataset(layout, n).rows_present for n in ("ep1", "picks")]


def test_trace_through_the_file_index_equals_the_scan(layout: LakeLayout) -> None:
    from pi_jobs.ops import trace

    columns = ["attempt_id", "chunk_index", "kafka_partition", "kafka_offset", "received_at_ns"]

    def both(episode_id: str) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
        key = lambda r: (r["kafka_partition"], r["kafka_offset"])  # noqa: E731
        return (
            sorted(trace._indexed_rows(layout.raw, episode_id, columns), key=key),
            sorted(trace._rows(layout.raw, episode_id, columns), key=key),
        )

    for episode_id in ("ep-000", "ep-002", "ep-bad", "no-such-episode"):
        indexed, scanned = both(episode_id)
        assert indexed == scanned
        assert (len(indexed) > 0) == (episode_id == "ep-bad")  # the only raw rows of this lake
    _quarantine_row(layout, 7, b"PIEP" * 4)  # a new raw file after the index was made
    indexed, scanned = both("ep-q7")
    assert indexed == scanned and [r["kafka_offset"] for r in indexed] == [107]


def test_pin_dataset_page_follows_the_pin_and_the_episodes_version(
    ui_lake: UiLake, layout: LakeLayout
) -> None:
    import re

    from deltalake import DeltaTable
    from pi_format.lake import PinStore
    from pi_jobs.maintenance.datasets import create_dataset
    from pi_jobs.ui import UiConfig, create_app
    from starlette.testclient import TestClient

    config = UiConfig(lake_root=layout.root, catalog=ui_lake.catalog, cache_dir=ui_lake.cache)

    def episodes(client: TestClient) -> int:
        response = client.get("/dataset?pin=two")
        assert response.status_code == 200
        found = re.search(r'id="d-episodes">([0-9,]+)<', response.text)
        assert found is not None
        return int(found.group(1).replace(",", ""))

    with TestClient(create_app(config), base_url="http://127.0.0.1:8765") as client:
        create_dataset(layout, "two", episode_ids=["ep-000", "ep-001"])
        assert episodes(client) == 2 and episodes(client) == 2
        DeltaTable(layout.episodes).delete("episode_id = 'ep-001'")  # a new episodes version
        assert episodes(client) == 1
        PinStore(layout).delete("two")
        create_dataset(layout, "two", episode_ids=["ep-000", "ep-002"])  # the same name, a new pin
        assert episodes(client) == 2
        assert client.get("/dataset?pin=nope").status_code == 404


def test_dataset_distributions_follow_the_episodes_and_deletions_versions(layout: LakeLayout) -> None:
    from pi_jobs.ui import _page_cache

    computed: list[int] = []

    def merge() -> tuple[int, ...]:
        computed.append(1)
        return (len(computed),)

    sample = pa.array(["ep-000", "ep-001"])
    of = (sample, None, 1)
    assert _page_cache.distributions(layout, of, merge) == (1,)
    assert _page_cache.distributions(layout, of, merge) == (1,)  # kept
    assert _page_cache.distributions(layout, (pa.array(["ep-001", "ep-000"]), None, 1), merge) == (1,)
    assert _page_cache.distributions(layout, (pa.array(["ep-000"]), None, 1), merge) == (2,)
    assert _page_cache.distributions(layout, (sample, pa.array(["k"]), 1), merge) == (3,)
    from deltalake import DeltaTable

    DeltaTable(layout.episodes).delete("episode_id = 'ep-001'")  # a new episodes version
    assert _page_cache.distributions(layout, of, merge) == (4,)
    assert _page_cache.distributions(layout, of, merge) == (4,)
