"""The ingest contract through the real PyFlink job, and the quarantine list/show/release.

One module fixture runs the stream job twice on a real Tansu broker: run 1 carries good
episodes (one shuffled with a duplicated chunk), one episode per new contract rule, an oversize
message, and three episodes with a chunk missing (they time out); run 2 brings the late part of
two of them (a full re-send of one, the single missing chunk of the other). The tests then read
the Delta tables and drive `pi_jobs.ops.quarantine` and `pilake quarantine` on that lake.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable
from pi_format import Ack, AckStatus, Episode, LakeLayout
from pi_format.wire import encode_episode, read_bundle

from tests.fixtures.stream_jobs import small_stream_job
from tests.jobs.contract_episodes import make_episode, with_arrays
from tests.jobs.test_stream_job import _read_acks

integration = pytest.mark.integration
PAYLOAD = 4096
OVERSIZE_BYTES = 3_000_000


@dataclass
class Run:
    config: Any  # StreamJobConfig
    layout: LakeLayout
    reports: list[Any]  # StreamReport of run 1 and run 2
    acks: list[Ack]
    good: list[Episode]
    bad: dict[str, Episode]  # expected reason -> episode
    timed_out: Episode  # incomplete, never completed
    late: Episode  # incomplete in run 1, its missing chunk arrives in run 2
    resent: Episode  # incomplete in run 1, fully re-sent in run 2
    oversize_key: str


def _bad_episodes() -> dict[str, Episode]:
    out = {"unknown_robot_type": make_episode("unknown", seed=1, robot_type="mystery_bot")}
    ep = make_episode("range", seed=2)
    proprio = ep.proprio.copy()
    proprio[3, 1] = 50.0
    out["out_of_range"] = with_arrays(ep, proprio=proprio)
    ep = make_episode("nan", seed=3)
    action = ep.action.copy()
    action[2, 0] = np.nan
    out["bad_values"] = with_arrays(ep, action=action)
    ep = make_episode("ts", seed=4)
    ts = ep.timestamps_ns.copy()
    ts[[6, 7]] = ts[[7, 6]]
    out["bad_timestamps"] = with_arrays(ep, timestamps_ns=ts)
    out["bad_rate"] = make_episode("rate", seed=5, step_period_ns=int(2e9 / 15.0))
    out["bad_video"] = make_episode("res", seed=6, video_size=(32, 24))  # declared 64x48
    return out


@pytest.fixture(scope="module")
def run(broker: str, stack_settings: Any, tmp_path_factory: pytest.TempPathFactory) -> Run:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    from pi_jobs.stream import run_stream_job

    tag = uuid.uuid4().hex[:8]
    raw_topic, ack_topic = f"q-raw-{tag}", f"q-ack-{tag}"
    admin = AdminClient({"bootstrap.servers": broker})
    for future in admin.create_topics(
        [NewTopic(raw_topic, num_partitions=2, replication_factor=1), NewTopic(ack_topic, 1, 1)]
    ).values():
        future.result(timeout=10)
    producer = Producer(
        {
            "bootstrap.servers": broker,
            "enable.idempotence": True,
            "linger.ms": 5,
            "message.max.bytes": 8_000_000,  # the oversize message must reach the broker
        }
    )

    def send(ep: Episode, values: list[bytes]) -> None:
        for value in values:
            producer.produce(raw_topic, key=ep.episode_id.encode(), value=value)

    good = [make_episode("good", seed=10), make_episode("shuffled", seed=11)]
    send(good[0], encode_episode(good[0], payload_bytes=PAYLOAD))
    shuffled = encode_episode(good[1], payload_bytes=PAYLOAD)
    order = [*shuffled, shuffled[1]]  # chunk 1 twice
    random.Random(7).shuffle(order)
    send(good[1], order)
    bad = _bad_episodes()
    for ep in bad.values():
        send(ep, encode_episode(ep, payload_bytes=PAYLOAD))
    oversize_key = f"big-{tag}"
    producer.produce(raw_topic, key=oversize_key.encode(), value=b"PIEP" + bytes(OVERSIZE_BYTES - 4))
    timed_out, late, resent = (make_episode(n, seed=20 + i) for i, n in enumerate(["gone", "late", "resent"]))
    for ep in (timed_out, late, resent):
        chunks = encode_episode(ep, payload_bytes=PAYLOAD)
        send(ep, chunks[:2] + chunks[3:])  # chunk 2 lost
    assert producer.flush(30) == 0

    work = tmp_path_factory.mktemp("quarantine-job")
    config = small_stream_job(
        broker=broker,
        root=work,
        jar_dir=stack_settings.jar_dir,
        raw_topic=raw_topic,
        ack_topic=ack_topic,
        group_id=f"q-group-{tag}",
        incomplete_timeout_s=3.0,
    )
    first = run_stream_job(config, until_idle=True, idle_timeout_s=2.0, max_runtime_s=240)
    send(resent, encode_episode(resent, payload_bytes=PAYLOAD))
    send(late, [encode_episode(late, payload_bytes=PAYLOAD)[2]])
    assert producer.flush(30) == 0
    second = run_stream_job(
        replace(config, work_dir=work / "flink2"), until_idle=True, idle_timeout_s=2.0, max_runtime_s=240
    )
    acks = _read_acks(broker, ack_topic, expected=len(good) + len(bad) + 1)
    return Run(
        config,
        LakeLayout(config.lake_root),
        [first, second],
        acks,
        good,
        bad,
        timed_out,
        late,
        resent,
        oversize_key,
    )


def _quarantine_rows(run: Run) -> list[dict[str, Any]]:
    return DeltaTable(run.layout.quarantine).to_pyarrow_table().to_pylist()


@integration
def test_job_counts_both_runs(run: Run) -> None:
    first, second = run.reports
    # run 1: two good episodes committed; 6 contract failures, 1 oversize, 3 incomplete
    assert (first.episodes_committed, first.quarantined, first.incomplete) == (2, 10, 0)
    # run 2: the re-send commits; the lone late chunk times out again
    assert (second.episodes_committed, second.quarantined, second.incomplete) == (1, 1, 0)


@integration
def test_each_rule_lands_in_quarantine_with_its_reason(run: Run) -> None:
    rows = _quarantine_rows(run)
    by_episode: dict[str, list[str]] = {}
    for r in rows:
        by_episode.setdefault(r["episode_id"], []).append(r["reason"])
    for reason, ep in run.bad.items():
        assert by_episode[ep.episode_id] == [reason], reason
    assert by_episode[run.oversize_key] == ["oversize"]
    assert by_episode[run.timed_out.episode_id] == ["incomplete_timeout"]
    assert by_episode[run.resent.episode_id] == ["incomplete_timeout"]
    assert by_episode[run.late.episode_id] == ["incomplete_timeout", "incomplete_timeout"]
    timeout_row = next(r for r in rows if r["episode_id"] == run.timed_out.episode_id)
    assert "missing [2]" in timeout_row["details"]
    assert len(timeout_row["kafka_offsets"]) == len(encode_episode(run.timed_out, payload_bytes=PAYLOAD)) - 1


@integration
def test_good_episodes_visible_once_and_bad_ones_not(run: Run) -> None:
    ids = DeltaTable(run.layout.episodes).to_pyarrow_table().column("episode_id").to_pylist()
    want = [ep.episode_id for ep in run.good] + [run.resent.episode_id]
    assert sorted(ids) == sorted(want)  # the shuffled, duplicated episode once; the re-send once
    # acks: committed for the good ones, quarantined (with the reason) for the contract failures,
    # none for incomplete episodes (a re-send may still complete them)
    acks = {a.episode_id: a for a in run.acks}
    for reason, ep in run.bad.items():
        assert (acks[ep.episode_id].status, acks[ep.episode_id].reason) == (AckStatus.QUARANTINED, reason)
    assert all(acks[eid].status is AckStatus.COMMITTED for eid in want)
    assert run.timed_out.episode_id not in acks and run.late.episode_id not in acks


@integration
def test_oversize_message_kept_as_a_prefix(run: Run, tmp_path: Path) -> None:
    from pi_jobs.ops.quarantine import dump_raw, find_entries

    (entry,) = find_entries(run.layout, run.oversize_key)
    assert entry.size_bytes == OVERSIZE_BYTES and "sha256" in entry.details
    path = tmp_path / "big.piep"
    assert dump_raw(run.layout, [entry], path) == 1
    assert [len(m) for m in read_bundle(path)] == [1_000_000]


@integration
def test_status_open_vs_closed_and_counting(run: Run) -> None:
    from pi_jobs.ops.quarantine import list_quarantine, open_quarantine_keys

    status = {e.counting_key: e.status for e in list_quarantine(run.layout, include_closed=True)}
    assert status[run.resent.episode_id] == "committed"  # superseded by the later complete re-send
    assert open_quarantine_keys(run.layout) == {
        *(ep.episode_id for ep in run.bad.values()),
        run.oversize_key,
        run.timed_out.episode_id,
        run.late.episode_id,
    }


@integration
def test_release_rebuilds_from_raw_across_runs_exactly_once(run: Run) -> None:
    from pi_jobs.ops.quarantine import list_quarantine, release_episode
    from pi_jobs.stream.contract import load_registry

    kwargs = {"catalog_path": run.config.catalog_path, "registry": load_registry(None)}
    result = release_episode(run.layout, run.late.episode_id, featurize_config=run.config.featurize, **kwargs)
    assert result.outcome == "committed" and len(result.quarantine_ids) == 2
    again = release_episode(run.layout, run.late.episode_id, featurize_config=run.config.featurize, **kwargs)
    assert (again.outcome, again.attempt_id) == ("already_committed", result.attempt_id)
    episodes = DeltaTable(run.layout.episodes).to_pyarrow_table()
    mine = episodes.filter(pc.equal(episodes.column("episode_id"), run.late.episode_id))
    assert mine.num_rows == 1
    steps = DeltaTable(run.layout.steps).to_pyarrow_table()
    steps = steps.filter(pc.equal(steps.column("attempt_id"), result.attempt_id)).sort_by("step_index")
    got = np.array(steps.column("proprio").to_pylist(), dtype=np.float32)
    assert got.view(np.uint32).tolist() == run.late.proprio.view(np.uint32).tolist()
    status = {e.counting_key: e.status for e in list_quarantine(run.layout, include_closed=True)}
    assert status[run.late.episode_id] == "committed"

    from pi_catalog import Catalog

    assert run.late.episode_id in Catalog(run.config.catalog_path).episode_ids(
        "SELECT episode_id FROM episodes"
    )


@integration
def test_release_after_registry_fix_via_cli(
    run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from pi_jobs.cli import main

    eid = run.bad["unknown_robot_type"].episode_id
    monkeypatch.setenv("PILAKE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PILAKE_LAKE", run.config.lake_root)
    monkeypatch.setenv("PILAKE_CATALOG", run.config.catalog_path)
    # The CLI's featurize settings are the defaults (224x224); that is what a release produces.
    assert main(["quarantine", "list", "--reason", "unknown_robot_type"]) == 0
    assert eid in capsys.readouterr().out
    assert main(["quarantine", "show", eid, "--dump", str(tmp_path / "e.piep")]) == 0
    shown = capsys.readouterr().out
    assert "unknown_robot_type" in shown and "raw " in shown
    assert len(read_bundle(tmp_path / "e.piep")) == len(
        encode_episode(run.bad["unknown_robot_type"], payload_bytes=PAYLOAD)
    )
    assert main(["quarantine", "release", eid]) == 1  # still unknown: rejected, nothing written
    assert "cannot be released: [unknown_robot_type]" in capsys.readouterr().err
    fixed = tmp_path / "robots.toml"
    packaged = Path(__file__).parents[2] / "jobs" / "pi_jobs" / "stream" / "robots.toml"
    fixed.write_text(
        packaged.read_text()
        + "\n[robot_types.mystery_bot]\nproprio_range = [-2, 2]\naction_range = [-2, 2]\n"
        "control_rate_hz = [1, 100]\ncamera_fps = [1, 60]\n"
    )
    monkeypatch.setenv("PILAKE_ROBOTS", str(fixed))
    assert main(["quarantine", "release", eid, "--note", "registry fixed"]) == 0
    assert "committed as attempt" in capsys.readouterr().out
    releases = DeltaTable(run.layout.quarantine_releases).to_pyarrow_table().to_pylist()
    mine = [r for r in releases if r["episode_id"] == eid]
    assert [(r["outcome"], r["note"]) for r in mine] == [("committed", "registry fixed")]
    assert main(["quarantine", "list"]) == 0
    assert eid not in capsys.readouterr().out


# -- release on a hand-built lake (no broker, no Flink) ------------------------------------------
def test_release_from_raw_rows_without_the_job(tmp_path: Path) -> None:
    import pyarrow as pa
    from pi_format import QUARANTINE_SCHEMA, RAW_SCHEMA
    from pi_format.lake import LakeWriter
    from pi_jobs.ops.quarantine import (
        QuarantineError,
        ReleaseRejected,
        list_quarantine,
        open_quarantine_keys,
        release_episode,
    )
    from pi_jobs.stream.contract import RobotRegistry, RobotType, load_registry
    from pi_jobs.stream.featurize import FeaturizeConfig

    layout = LakeLayout(str(tmp_path / "lake"))
    writer = LakeWriter(layout)
    ep = make_episode("hand", seed=3, robot_type="newbot")
    messages = encode_episode(ep, payload_bytes=PAYLOAD)
    # the job kept the chunks in two attempts (a timeout, then the late chunk 0) and a garbage row
    split = [("a1", messages[1:]), ("a2", messages[:1])]
    offset = 0
    for attempt, values in split:
        rows = []
        for value in values:
            rows.append(
                {
                    "episode_id": ep.episode_id,
                    "chunk_index": 0,
                    "kafka_topic": "t",
                    "kafka_partition": 0,
                    "kafka_offset": offset,
                    "received_at_ns": offset,
                    "attempt_id": attempt,
                    "message": value,
                }
            )
            offset += 1
        writer.write_raw(pa.Table.from_pylist(rows, schema=RAW_SCHEMA))
        writer.write_quarantine(
            pa.Table.from_pylist(
                [
                    {
                        "quarantine_id": f"q-{attempt}",
                        "episode_id": ep.episode_id,
                        "reason": "incomplete_timeout",
                        "details": "",
                        "kafka_topic": "t",
                        "kafka_partition": 0,
                        "kafka_offsets": list(range(offset - len(values), offset)),
                        "raw_pointer": "",
                        "size_bytes": 1,
                        "attempt_id": attempt,
                        "quarantined_at_ns": offset,
                    }
                ],
                schema=QUARANTINE_SCHEMA,
            )
        )
    writer.write_quarantine(
        pa.Table.from_pylist(
            [
                {
                    "quarantine_id": "q-junk",
                    "episode_id": None,
                    "reason": "bad_magic",
                    "details": "",
                    "kafka_topic": "t",
                    "kafka_partition": 1,
                    "kafka_offsets": [7],
                    "raw_pointer": "",
                    "size_bytes": 1,
                    "attempt_id": "a3",
                    "quarantined_at_ns": 99,
                }
            ],
            schema=QUARANTINE_SCHEMA,
        )
    )
    assert open_quarantine_keys(layout) == {ep.episode_id, "kafka:t/1/7"}
    config = FeaturizeConfig(video_width=32, video_height=32, chunk_frames=4)
    with pytest.raises(ReleaseRejected, match="unknown_robot_type") as info:
        release_episode(
            layout, ep.episode_id, catalog_path=None, registry=load_registry(None), featurize_config=config
        )
    assert info.value.reason.value == "unknown_robot_type"
    assert DeltaTable(layout.episodes).to_pyarrow_table().num_rows == 0  # nothing written
    newbot = RobotType("newbot", (-1, 1), (-1, 1), (1, 100), (1, 60))
    result = release_episode(
        layout,
        ep.episode_id,
        catalog_path=None,
        registry=RobotRegistry((newbot,)),
        featurize_config=config,
        note="added newbot",
    )
    assert (result.outcome, sorted(result.quarantine_ids)) == ("committed", ["q-a1", "q-a2"])
    assert open_quarantine_keys(layout) == {"kafka:t/1/7"}
    assert {e.status for e in list_quarantine(layout, include_closed=True)} == {"committed", "open"}
    with pytest.raises(QuarantineError, match="no quarantine row"):
        release_episode(
            layout, "nobody", catalog_path=None, registry=RobotRegistry((newbot,)), featurize_config=config
        )
