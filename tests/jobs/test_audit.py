"""`pilake audit`: the pure counting, and collection from a real spool, Delta lake and catalog."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from pi_format import QUARANTINE_SCHEMA, CameraSpec, CameraVideo, Episode, EpisodeMeta, LakeLayout
from pi_format.video import encode_mp4
from pi_jobs.ops.audit import (
    AuditInputs,
    QuarantineRecord,
    TopicOffsets,
    audit,
    format_report,
    reconcile,
)


def q(eid: str | None, reason: str, records: int = 1, at_ns: int = 0, key: str = "") -> QuarantineRecord:
    return QuarantineRecord(eid, reason, records, at_ns, kafka_key=key)


# -- reconcile (pure) ---------------------------------------------------------------------------
def test_all_visible_is_ok() -> None:
    r = reconcile(
        AuditInputs(
            submitted={"a": 1, "b": 1},
            confirmed={"a": "committed", "b": "committed"},
            raw_episode_ids=["a", "a", "b"],
            visible_rows=[("a", "1"), ("b", "2")],
            catalog_ids=["a", "b"],
        )
    )
    assert (r.episodes_in, r.visible, r.quarantined, r.missing, r.duplicated) == (2, 2, 0, 0, 0)
    assert r.ok and r.catalog_agrees and r.unconfirmed == 0 and r.raw_records == 3


def test_missing_is_in_minus_visible_minus_quarantined() -> None:
    r = reconcile(
        AuditInputs(
            submitted={"a": 1, "b": 1, "c": 1},
            raw_episode_ids=["a", "d"],  # d came from a producer without a ledger
            visible_rows=[("a", "1")],
            quarantine_rows=[q("b", "bad_video")],
        )
    )
    assert (r.episodes_in, r.visible, r.quarantined, r.missing) == (4, 1, 1, 2)
    assert r.missing_ids == ("c", "d")
    assert (r.submitted, r.topic_only, r.unconfirmed) == (3, 1, 3)
    assert r.quarantined_by_reason == {"bad_video": 1}
    assert not r.ok


def test_visible_wins_over_an_earlier_quarantined_chunk() -> None:
    # a corrupted chunk was quarantined, the re-send went through: visible, not quarantined
    r = reconcile(AuditInputs(submitted={"a": 1}, visible_rows=[("a", "2")], quarantine_rows=[q("a", "x")]))
    assert (r.visible, r.quarantined, r.missing) == (1, 0, 0)


def test_latest_quarantine_reason_counts() -> None:
    rows = [
        q("a", "chunk_checksum", at_ns=5),
        q("a", "incomplete_timeout", at_ns=9),
        q("b", "oversize", at_ns=1),
    ]
    r = reconcile(AuditInputs(quarantine_rows=rows))
    assert r.quarantined_by_reason == {"incomplete_timeout": 1, "oversize": 1}
    assert (r.episodes_in, r.quarantined, r.missing) == (2, 2, 0)


def test_duplicates_in_lake_and_catalog() -> None:
    r = reconcile(
        AuditInputs(
            submitted={"a": 2, "b": 1, "c": 1},  # a was submitted twice: not a duplicate by itself
            visible_rows=[("a", "1"), ("b", "1"), ("b", "2"), ("c", "1")],
            catalog_ids=["a", "b", "c", "c"],
        )
    )
    assert (r.visible, r.duplicated, r.duplicated_ids) == (3, 2, ("b", "c"))
    assert not r.ok


def test_catalog_disagreement_fails_the_audit() -> None:
    r = reconcile(AuditInputs(visible_rows=[("a", "1"), ("b", "1")], catalog_ids=["b", "z"]))
    assert (r.catalog_missing, r.catalog_extra) == (("a",), ("z",))
    assert (r.missing, r.duplicated) == (0, 0) and not r.ok
    assert "catalog DISAGREES" in format_report(r)


def test_rows_without_an_id_count_by_offset() -> None:
    # SPEC 7.5: garbage counts under kafka:<topic>/<partition>/<first offset>, always open
    rows = [
        q(None, "bad_magic", 2, key="kafka:t/0/5"),
        q(None, "truncated", 1, key="kafka:t/1/0"),
        q("a", "x"),
    ]
    r = reconcile(AuditInputs(raw_episode_ids=[None, None, None, "a"], quarantine_rows=rows))
    assert (r.raw_records, r.raw_records_without_id, r.quarantined_records_without_id) == (4, 3, 3)
    assert (r.episodes_in, r.quarantined, r.quarantined_without_id, r.missing) == (3, 3, 2, 0)
    assert r.quarantined_by_reason == {"bad_magic": 1, "truncated": 1, "x": 1}


def test_released_rows_are_closed() -> None:
    rows = [q("a", "bad_video"), q("b", "bad_video")]
    r = reconcile(AuditInputs(quarantine_rows=rows, visible_rows=[("a", "2")], released=["a"]))
    assert (r.visible, r.quarantined, r.missing) == (1, 1, 0)
    # a release that left nothing visible is a bug the audit shows as missing
    r = reconcile(AuditInputs(quarantine_rows=rows, released=["a"]))
    assert (r.quarantined, r.missing, r.missing_ids) == (1, 1, ("a",))


def test_topic_lag_offsets() -> None:
    topic = TopicOffsets(end={0: 10, 1: 4, 2: 0}, committed={0: 7, 1: -1})
    assert topic.lag_offsets == 3 + 4
    r = reconcile(AuditInputs(topic=topic))
    assert r.topic_lag_offsets == 7
    assert "offset lag on the topic: 7" in format_report(r)


def test_report_json_round_trips() -> None:
    r = reconcile(AuditInputs(submitted={"a": 1}))
    doc = json.loads(json.dumps(r.to_json()))
    assert (doc["missing"], doc["ok"], doc["missing_ids"]) == (1, False, ["a"])


# -- collect from real components ----------------------------------------------------------------
def _episode(eid: str) -> Episode:
    frames = [np.full((32, 48, 3), 40 * i, np.uint8) for i in range(4)]
    spec = CameraSpec(name="cam", codec="h264", container="mp4", width=48, height=32, fps=10.0)
    cam = CameraVideo(
        spec, np.arange(4, dtype=np.int64) * 100_000_000, encode_mp4(frames, fps=10.0, width=48, height=32)
    )
    return Episode(
        EpisodeMeta(eid, "r1", "aloha", "t", 0, 10.0, True),
        np.arange(5, dtype=np.int64) * 100_000_000,
        np.zeros((5, 2), np.float32),
        np.zeros((5, 1), np.float32),
        (cam,),
    )


def _quarantine_row(eid: str | None, reason: str) -> pa.Table:
    return pa.Table.from_pylist(
        [
            {
                "quarantine_id": f"q-{eid}",
                "episode_id": eid,
                "reason": reason,
                "details": "test",
                "kafka_topic": "t",
                "kafka_partition": 0,
                "kafka_offsets": [1, 2],
                "raw_pointer": "raw: test",
                "size_bytes": 3,
                "attempt_id": "att",
                "quarantined_at_ns": 1,
            }
        ],
        schema=QUARANTINE_SCHEMA,
    )


def test_collect_from_spool_lake_and_catalog(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pi_catalog import Catalog
    from pi_format.lake import LakeWriter
    from pi_format.wire import encode_episode
    from pi_ingest import Spool
    from pi_jobs.cli import main
    from pi_jobs.stream.featurize import FeaturizeConfig, featurize

    home = tmp_path / "home"
    layout = LakeLayout(str(home / "lake"))
    spool = Spool(home / "spool")
    writer = LakeWriter(layout)
    catalog = Catalog(str(home / "catalog"))
    for eid in ("e1", "e2", "e3"):
        spool.add(eid, encode_episode(_episode(eid)))
    for eid in ("e1", "e2"):
        f = featurize(
            _episode(eid),
            attempt_id=f"att-{eid}",
            received_at_ns=1,
            raw_size_bytes=2,
            committed_at_ns=3,
            config=FeaturizeConfig(video_width=32, video_height=32, chunk_frames=2),
        )
        version = writer.commit_episode(f)
        catalog.record_episodes(f.episode, episodes_version=version)
        spool.confirm(eid, attempt_id=f"att-{eid}")
    writer.write_quarantine(_quarantine_row(None, "bad_magic"))

    report = audit(layout, spool_dirs=[home / "spool"], catalog_path=str(home / "catalog"))
    # the garbage row counts by offset: in and quarantined
    assert (report.episodes_in, report.visible, report.quarantined, report.missing) == (4, 2, 1, 1)
    assert report.missing_ids == ("e3",) and report.unconfirmed == 1
    assert report.catalog_agrees and report.quarantined_records_without_id == 2
    assert report.quarantined_without_id == 1

    monkeypatch.setenv("PILAKE_HOME", str(home))
    assert main(["audit", "--no-topic"]) == 1  # e3 is missing
    writer.write_quarantine(_quarantine_row("e3", "bad_video"))
    assert main(["audit", "--no-topic", "--json"]) == 0
    assert main(["audit", "--no-topic", "--spool", str(tmp_path / "other")]) == 0  # no ledger there


def test_audit_of_an_empty_lake(tmp_path: Path) -> None:
    report = audit(LakeLayout(str(tmp_path / "lake")), spool_dirs=[tmp_path / "spool"])
    assert (report.episodes_in, report.missing, report.ok) == (0, 0, True)


def test_audit_reads_every_spool_of_the_installation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A failed import's leftovers in spool-import (issue 31: audit read only spool/ and said OK):
    the default audit finds spool/, spool-import/, each import's own spool and other spool*
    directories, counts their ledgers and names what is left in them."""
    from pi_format.wire import BUNDLE_SUFFIX, encode_episode, write_bundle
    from pi_ingest import Spool
    from pi_jobs.cli import main
    from pi_jobs.ops.audit import find_spools

    home = tmp_path / "home"
    Spool(home / "spool")
    Spool(home / "spool-import").add("legacy", encode_episode(_episode("legacy")))  # the old layout
    Spool(home / "spool-import" / "0123abcd").add("imp1", encode_episode(_episode("imp1")))
    Spool(home / "spool-writers").add("w1", encode_episode(_episode("w1")))
    staging = home / "spool-import" / ".staging-999999-abcd"
    staging.mkdir()
    write_bundle(staging / f"half{BUNDLE_SUFFIX}", encode_episode(_episode("half")))
    assert [p.relative_to(home).as_posix() for p in find_spools(home)] == [
        "spool",
        "spool-import",
        "spool-import/0123abcd",
        "spool-writers",
    ]
    report = audit(LakeLayout(str(home / "lake")), spool_dirs=find_spools(home))
    assert report.missing_ids == ("imp1", "legacy", "w1") and report.staging_leftovers == 1
    assert len(report.spool_leftovers) == 4 and not report.ok
    monkeypatch.setenv("PILAKE_HOME", str(home))
    assert main(["audit", "--no-topic", "--no-catalog"]) == 1
    out = capsys.readouterr().out
    assert "staging of an import killed while reading (1 episodes read, none spooled or sent)" in out
    assert "spool-import/0123abcd: 1 episodes spooled without a lake ack [imp1]" in out
    assert "spool-import: 1 episodes left by an import of an older pilake [legacy]" in out
    assert "missing             3" in out
