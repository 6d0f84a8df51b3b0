"""Every catalog writer against a ClickHouse server catalog (http://), with the results of the
embedded one: the catalog rebuild, a backfill (its PyFlink job records from the workers), an
episode deletion, a quarantine release and GC. (The stream job's records go to a server catalog
in tests/jobs/test_s3_cluster.py.)

No ClickHouse server installs here: the server is the chdb HTTP test double
(tests/fixtures/clickhouse_http_double.py). Two identical lakes are written; one is indexed in an
embedded catalog, the other in the server catalog, and each writer runs on both where its result
is deterministic (rebuild, deletion, GC: the two catalogs must hold the same rows). A backfill and
a release make new attempt ids, so there the server catalog is compared with an embedded catalog
rebuilt from the same lake (the catalog is derived from the lake, decision 7).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import clickhouse_connect
import pyarrow as pa
import pytest
from pi_catalog import Catalog
from pi_catalog._connection import PASSWORD_ENV, USER_ENV
from pi_format import LakeLayout

from tests.fixtures.clickhouse_http_double import RunningDouble, chdb_http_server

pytestmark = pytest.mark.integration

USER, PASSWORD = "pilake", "pw-writers-Zt51"
ROWS = "SELECT * EXCEPT indexed_at FROM episodes ORDER BY episode_id"
# Against a rebuild: a rebuild records the episodes table's version it read each row at, an
# incremental record the version its commit made; after a rewrite (GC) those differ by design.
ROWS_BUT_VERSION = "SELECT * EXCEPT (indexed_at, episodes_version) FROM episodes ORDER BY episode_id"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningDouble]:
    with chdb_http_server(
        str(tmp_path_factory.mktemp("clickhouse") / "data"), user=USER, password=PASSWORD
    ) as s:
        yield s


def _server_catalog(server: RunningDouble) -> str:
    database = f"w_{uuid.uuid4().hex[:12]}"
    admin = clickhouse_connect.get_client(
        host="127.0.0.1", port=server.port, username=USER, password=PASSWORD
    )
    admin.command(f"CREATE DATABASE {database}")
    admin.close()
    return f"{server.url}/{database}"


def _rows(path: str, sql: str = ROWS) -> list[dict[str, Any]]:
    catalog = Catalog(path)
    try:
        return list(catalog.query_arrow(sql).to_pylist())
    finally:
        catalog.close()


def _quarantined_episode(layout: LakeLayout) -> str:
    """Raw rows and an open quarantine row (unknown robot type) for one episode; returns its id."""
    from pi_format import QUARANTINE_SCHEMA, RAW_SCHEMA
    from pi_format.lake import LakeWriter
    from pi_format.wire import encode_episode

    from tests.jobs.contract_episodes import make_episode

    ep = make_episode("held", seed=5, robot_type="newbot")
    writer = LakeWriter(layout, writer_id="test-quarantine")
    messages = encode_episode(ep, payload_bytes=4096)
    raw = [
        {
            "episode_id": ep.episode_id,
            "chunk_index": 0,
            "kafka_topic": "t",
            "kafka_partition": 0,
            "kafka_offset": 1000 + i,
            "received_at_ns": i,
            "attempt_id": "q-attempt",
            "message": value,
        }
        for i, value in enumerate(messages)
    ]
    writer.write_raw(pa.Table.from_pylist(raw, schema=RAW_SCHEMA))
    quarantine = {
        "quarantine_id": "q-held",
        "episode_id": ep.episode_id,
        "reason": "unknown_robot_type",
        "details": "robot type newbot is not in the registry",
        "kafka_topic": "t",
        "kafka_partition": 0,
        "kafka_offsets": [1000 + i for i in range(len(messages))],
        "raw_pointer": "",
        "size_bytes": 1,
        "attempt_id": "q-attempt",
        "quarantined_at_ns": 1,
    }
    writer.write_quarantine(pa.Table.from_pylist([quarantine], schema=QUARANTINE_SCHEMA))
    return str(ep.episode_id)


def test_every_catalog_writer_on_a_server_catalog_gives_the_embedded_results(
    server: RunningDouble, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pi_jobs.maintenance import GcConfig, gc
    from pi_jobs.maintenance.deletion import delete_episodes
    from pi_jobs.ops.quarantine import release_episode
    from pi_jobs.stream.contract import RobotRegistry, RobotType
    from pi_jobs.stream.featurize import FeaturizeConfig

    from tests.jobs.test_backfill import make_stream_lake

    monkeypatch.setenv(USER_ENV, USER)
    monkeypatch.setenv(PASSWORD_ENV, PASSWORD)
    base, _, ids = make_stream_lake(tmp_path / "base", 4)
    held = _quarantined_episode(base)
    shutil.copytree(base.root, tmp_path / "twin")
    local, remote = base, LakeLayout(str(tmp_path / "twin"))  # the same lake twice
    embedded, server_url = str(tmp_path / "base" / "catalog"), _server_catalog(server)
    reference = str(tmp_path / "reference")  # an embedded catalog rebuilt from the server's lake

    def same_on_both() -> list[dict[str, Any]]:
        rows = _rows(server_url)
        assert rows == _rows(embedded)
        return rows

    def same_as_rebuilt() -> list[dict[str, Any]]:
        ref = Catalog(reference)
        try:
            ref.rebuild(remote)
        finally:
            ref.close()
        rows, expected = _rows(server_url, ROWS_BUT_VERSION), _rows(reference, ROWS_BUT_VERSION)
        differ = {
            (a["episode_id"], k, str(a[k])[:40], str(b.get(k))[:40])
            for a, b in zip(rows, expected, strict=False)
            for k in a
            if a[k] != b.get(k)
        }
        assert rows == expected, sorted(differ)
        return rows

    # rebuild (`pilake catalog rebuild`): an empty server catalog, a stale embedded one
    for lake, path in ((local, embedded), (remote, server_url)):
        catalog = Catalog(path)
        try:
            assert catalog.rebuild(lake).episodes == 4
        finally:
            catalog.close()
    assert [r["episode_id"] for r in same_on_both()] == sorted(ids)

    # deletion (`pilake episodes delete`): the catalog forgets the episode at once
    gone = sorted(ids)[0]
    reports = [
        delete_episodes(lake, [gone], reason="consent withdrawn", selection="ids", catalog=path)
        for lake, path in ((local, embedded), (remote, server_url))
    ]
    assert [r.catalog_forgotten for r in reports] == [1, 1]
    assert gone not in {r["episode_id"] for r in same_on_both()}

    # GC (`pilake gc`): removes the deleted episode's bytes; the catalog still indexes the same rows
    for lake in (local, remote):
        assert gc(lake, GcConfig(retention_hours=0)).markers_removed == {"deleted": 1}
    assert len(same_on_both()) == 3
    same_as_rebuilt()

    # quarantine release (`pilake quarantine release`): the held episode is committed and indexed
    newbot = RobotType("newbot", (-1, 1), (-1, 1), (1, 100), (1, 60))
    released = release_episode(
        remote,
        held,
        catalog_path=server_url,
        registry=RobotRegistry((newbot,)),
        featurize_config=FeaturizeConfig(video_width=32, video_height=32, chunk_frames=4),
    )
    assert released.outcome == "committed"
    assert held in {r["episode_id"] for r in same_as_rebuilt()}

    # backfill (`pilake backfill`): new attempts recorded by the job's workers
    chosen = sorted(ids)[1]
    before = {r["episode_id"]: r["attempt_id"] for r in _rows(server_url)}
    # as an operator runs it: `pilake backfill` in its own process (its Flink JVM and Python
    # workers get this environment, the catalog credentials included)
    env = {
        **os.environ,
        "PILAKE_HOME": str(tmp_path / "home"),
        "PILAKE_LAKE": remote.root,
        "PILAKE_CATALOG": server_url,
        USER_ENV: USER,
        PASSWORD_ENV: PASSWORD,
    }
    where = f"episode_id = '{chosen}'"
    done = subprocess.run(
        [
            str(Path(sys.executable).with_name("pilake")),
            "backfill",
            "--featurizer",
            "res96",
            "--where",
            where,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    after = {r["episode_id"]: r["attempt_id"] for r in same_as_rebuilt()}
    assert after[chosen] != before[chosen]  # the new attempt is the one indexed
    assert {k: v for k, v in after.items() if k != chosen} == {k: v for k, v in before.items() if k != chosen}
