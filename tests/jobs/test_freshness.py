"""Freshness (pi_jobs.ops.freshness, `pilake freshness`): the pure statistics, and the real stream
job recording both times of every committed episode."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pi_jobs.ops.freshness import (
    FreshnessError,
    FreshnessRows,
    histogram_bins,
    parse_window,
    percentiles,
    summarize,
    write_histogram,
)

from tests.fixtures.stream_jobs import small_stream_job

integration = pytest.mark.integration


# -- pure logic ----------------------------------------------------------------------------------


def test_percentiles_interpolate_between_order_statistics() -> None:
    assert percentiles([4.0, 1.0, 3.0, 2.0], [0, 50, 100]) == [1.0, 2.5, 4.0]
    values = np.arange(1, 101, dtype=np.float64)  # 1..100
    p50, p95, p99 = percentiles(values, [50, 95, 99])
    assert (p50, p95, p99) == pytest.approx((50.5, 95.05, 99.01))


def test_percentiles_reject_bad_input() -> None:
    with pytest.raises(FreshnessError, match="empty"):
        percentiles([], [50])
    with pytest.raises(FreshnessError, match="finite"):
        percentiles([1.0, float("nan")], [50])
    with pytest.raises(FreshnessError, match=r"\[0, 100\]"):
        percentiles([1.0], [101])


def test_summary_figures_and_empty_window() -> None:
    s = summarize([2.0, 0.5, 1.0], missing_published=4)
    assert (s.count, s.missing_published, s.p50_s, s.min_s, s.max_s) == (3, 4, 1.0, 0.5, 2.0)
    assert s.p50_s <= s.p95_s <= s.p99_s <= s.max_s  # type: ignore[operator]
    text = s.format()
    assert "episodes  3" in text and "p95" in text and "not counted): 4" in text
    empty = summarize([])
    assert (empty.count, empty.p50_s) == (0, None)
    assert "p50       -" in empty.format()


def test_rows_latencies_skip_missing_publish_time() -> None:
    published = (1_000_000_000, None, 2_000_000_000)
    rows = FreshnessRows(("a", "b", "c"), published, (3_500_000_000, 9, 2_250_000_000))
    assert rows.latencies_s().tolist() == [2.5, 0.25]
    assert rows.missing_published == 1


def test_parse_window() -> None:
    windows = [parse_window(t) for t in ("90s", "15m", "1h", "2d", "30", "0.5h")]
    assert windows == [90, 900, 3600, 172800, 30, 1800]
    for bad in ("", "1w", "-1h", "0m", "h"):
        with pytest.raises(FreshnessError, match="window"):
            parse_window(bad)


def test_histogram_bins() -> None:
    assert histogram_bins([1.0, 2.0, 3.0, 4.0]).tolist() == [0.0, 2.0, 4.0]
    assert histogram_bins([3.0]).tolist() == [0.0, 3.0]
    assert histogram_bins([-0.5, 1.0]).tolist()[0] == -0.5  # producer clock ahead: still shown
    edges = histogram_bins(np.linspace(0, 10, 10_000))
    assert len(edges) == 41 and edges[-1] == 10.0
    with pytest.raises(FreshnessError):
        histogram_bins([])


def test_histogram_png_written(tmp_path: Path) -> None:
    out = write_histogram([0.4, 0.8, 1.2, 5.0], tmp_path / "sub" / "f.png", title="test")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(FreshnessError, match="nothing to plot"):
        write_histogram([], tmp_path / "g.png", title="test")


# -- the real stream job -------------------------------------------------------------------------


@integration
def test_stream_job_records_freshness(broker: str, stack_settings: Any, tmp_path: Path) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    from deltalake import DeltaTable
    from pi_catalog import Catalog
    from pi_format import LakeLayout
    from pi_format.wire import encode_episode
    from pi_jobs.stream import run_stream_job

    from tests.jobs.test_stream_job import _episode

    run = uuid.uuid4().hex[:8]
    raw_topic, ack_topic = f"fr-raw-{run}", f"fr-ack-{run}"
    admin = AdminClient({"bootstrap.servers": broker})
    for future in admin.create_topics([NewTopic(raw_topic, 2, 1), NewTopic(ack_topic, 1, 1)]).values():
        future.result(timeout=10)
    episodes = [_episode(i) for i in range(3)]
    producer = Producer({"bootstrap.servers": broker, "enable.idempotence": True, "linger.ms": 5})
    before_ns = time.time_ns()
    for ep in episodes:
        for value in encode_episode(ep, payload_bytes=4096):
            producer.produce(raw_topic, key=ep.episode_id.encode(), value=value)
    assert producer.flush(30) == 0
    after_send_ns = time.time_ns()

    config = small_stream_job(
        broker=broker,
        root=tmp_path,
        jar_dir=stack_settings.jar_dir,
        raw_topic=raw_topic,
        ack_topic=ack_topic,
        group_id=f"fr-group-{run}",
    )
    report = run_stream_job(config, until_idle=True, idle_timeout_s=2.0, max_runtime_s=240)
    assert report.episodes_committed == 3

    committed = DeltaTable(LakeLayout(config.lake_root).episodes).to_pyarrow_table(
        columns=["episode_id", "attempt_id"]
    )
    ids, attempts = committed.column("episode_id").to_pylist(), committed.column("attempt_id").to_pylist()
    catalog = Catalog(config.catalog_path)
    rows = catalog.query_arrow(
        "SELECT episode_id, attempt_id, published_at_ns, lake_committed_at_ns, readable_at_ns "
        "FROM episode_freshness ORDER BY episode_id"
    ).to_pylist()
    catalog.close()  # hand the chdb path to the CLI process below
    by_id = {str(r["episode_id"]): r for r in rows}
    assert sorted(by_id) == sorted(ids)
    for eid, attempt in zip(ids, attempts, strict=True):
        r = by_id[eid]
        assert r["attempt_id"] == attempt
        published, readable = r["published_at_ns"], r["readable_at_ns"]
        assert published is not None, f"{eid}: no publish time reached the sink"
        # the Kafka timestamp is the producer's send time (ms precision)
        assert before_ns - 1_000_000 <= published <= after_send_ns + 1_000_000
        assert published <= r["lake_committed_at_ns"] <= readable

    out = tmp_path / "hist" / "freshness.png"
    env = {**os.environ, "PILAKE_HOME": str(tmp_path / "home"), "PILAKE_CATALOG": config.catalog_path}
    cmd = [sys.executable, "-m", "pi_jobs.cli", "freshness", "--since", "1h", "--out", str(out)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "episodes  3" in done.stdout and "p50" in done.stdout and "p99" in done.stdout
    assert f"histogram: {out}" in done.stdout
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    done = subprocess.run([*cmd, "--json"], env=env, capture_output=True, text=True, timeout=300)
    doc = json.loads(done.stdout)
    assert doc["count"] == 3 and 0 < doc["p50_s"] <= doc["p95_s"] <= doc["p99_s"] <= doc["max_s"]
