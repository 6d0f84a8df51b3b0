"""A small lake for the UI tests, made once per session: 3 episodes of 2 cameras through
LakeWriter (tests/fixtures/lake_factory), its catalog rebuilt from it, an annotation, a
quarantine row with raw bytes and a pin. Episode 2's annotation, the quarantine row's reason and
details and an extra catalog row's episode id, robot and task hold HTML, to show that the pages
escape them."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pytest
from pi_format import QUARANTINE_SCHEMA, RAW_SCHEMA, LakeLayout
from pi_format.lake import ensure_lake_tables

from tests.fixtures.lake_factory import FakeLake, episode_rows, make_episode, write_lake

SCRIPT = "<script>window.__pwned = 1</script>"
HTML_EPISODE_ID = f"ep-{SCRIPT}"
HTML_ROBOT = f"robot-{SCRIPT}"
HTML_TASK = f"task \"'<b>{SCRIPT}"
QUARANTINE_ID = "q-html-0001"


@dataclass(frozen=True)
class UiLake:
    lake: FakeLake
    catalog: str
    cache: Path

    @property
    def layout(self) -> LakeLayout:
        return self.lake.layout


def _quarantine(layout: LakeLayout) -> None:
    from deltalake import write_deltalake

    now = time.time_ns()
    raw = pa.Table.from_pylist(
        [
            {
                "episode_id": "ep-bad",
                "chunk_index": 0,
                "kafka_topic": "episodes.raw.v1",
                "kafka_partition": 1,
                "kafka_offset": 7,
                "received_at_ns": now,
                "attempt_id": "att-q",
                "message": b"PIEP\x01" + SCRIPT.encode() + bytes(range(32)),
            }
        ],
        schema=RAW_SCHEMA,
    )
    row = pa.Table.from_pylist(
        [
            {
                "quarantine_id": QUARANTINE_ID,
                "episode_id": "ep-bad",
                "reason": f"bad_magic{SCRIPT}",
                "details": f"details {SCRIPT}",
                "kafka_topic": "episodes.raw.v1",
                "kafka_partition": 1,
                "kafka_offsets": [7],
                "raw_pointer": "att-q:1:7",
                "size_bytes": 41,
                "attempt_id": "att-q",
                "quarantined_at_ns": now,
            }
        ],
        schema=QUARANTINE_SCHEMA,
    )
    # the stream job's own quarantine path needs the broker and Flink; the UI only reads the rows
    write_deltalake(layout.raw, raw, mode="append")
    write_deltalake(layout.quarantine, row, mode="append")


@pytest.fixture(scope="session")
def ui_lake(tmp_path_factory: pytest.TempPathFactory) -> UiLake:
    from pi_catalog import Catalog
    from pi_format.lake import Annotation, AnnotationStore
    from pi_jobs.maintenance.datasets import create_dataset

    root = tmp_path_factory.mktemp("ui-lake")
    lake = write_lake(root / "lake", episodes=3, steps=40, cameras=("front", "wrist"), size=(64, 48))
    ensure_lake_tables(lake.layout)
    _quarantine(lake.layout)
    ep2 = lake.episodes["ep-002"]
    AnnotationStore(lake.layout).append(
        [Annotation("ep-002", ep2.attempt_id, 0, 10, "instruction", f"pick it {SCRIPT}", source="test")]
    )
    catalog = Catalog(str(root / "catalog"))
    catalog.rebuild(lake.layout)
    # a catalog row whose id holds HTML (names on the wire cannot; the catalog is SQL, it can)
    odd = make_episode(9, steps=2, cameras=("front",), size=(16, 16), seed=0)
    odd.episode_id = HTML_EPISODE_ID
    odd.robot_id, odd.task = HTML_ROBOT, HTML_TASK
    catalog.record_episodes(episode_rows([odd]), episodes_version=0)
    catalog.close()
    create_dataset(
        lake.layout,
        "picks",
        sql="SELECT episode_id FROM episodes WHERE task = 'pick' AND startsWith(episode_id, 'ep-0')",
        catalog=str(root / "catalog"),
    )
    return UiLake(lake, str(root / "catalog"), root / "cache")
