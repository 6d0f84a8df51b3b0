"""The uploader's Prometheus metrics, scraped over HTTP after real sends to the session's broker.

Acks are published by the test (as in test_uploader: a stand-in for the stream job's acks, which
the end-to-end tests cover). Counters are process-wide, so every check compares a scrape after
the work with a scrape before it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from pi_format import AckStatus
from pi_format.wire import encode_episode
from pi_ingest import Uploader, UploaderConfig
from pi_ingest._metrics import served_port

from tests.conftest import _free_port
from tests.fixtures.metrics_scrape import scrape
from tests.ingest.test_uploader import _episodes, ack, publish, wait_confirmed

integration = pytest.mark.integration


def delta(before: dict, after: dict, name: str, **labels: str) -> float:
    key = (name, tuple(sorted(labels.items())))
    return after.get(key, 0.0) - before.get(key, 0.0)


@pytest.fixture(scope="module")
def metrics_port() -> int:
    return _free_port()


@integration
def test_counters_equal_what_the_uploader_did(broker: str, tmp_path: Path, metrics_port: int) -> None:
    episodes = _episodes(seed=7101, count=2)
    messages = {e.episode_id: encode_episode(e) for e in episodes}
    # resend_after_s=0: the second send_pending re-sends both (no ack came in between)
    config = UploaderConfig(broker, tmp_path / "spool", resend_after_s=0.0, metrics_port=metrics_port)
    with Uploader(config) as up:
        # one endpoint per process: an earlier uploader of this process may have chosen the port
        metrics_port = served_port() or metrics_port
        before = scrape(metrics_port)
        for e in episodes:
            up.submit(e)
        up.submit(episodes[0])  # the same episode again is a no-op, not a second spooled one
        spooled = scrape(metrics_port)
        bundle_bytes = sum(p.stat().st_size for p in (tmp_path / "spool").glob("*.piep"))
        assert up.send_pending() == sum(len(m) for m in messages.values())
        up.send_pending()
        sent = scrape(metrics_port)
        publish(broker, [ack(episodes[0].episode_id), ack(episodes[1].episode_id, AckStatus.QUARANTINED)])
        wait_confirmed(up)
        assert len(up.spool) == 0
        after = scrape(metrics_port)

    assert delta(before, spooled, "pilake_uploader_episodes_spooled_total") == 2
    assert spooled[("pilake_uploader_spool_episodes", ())] >= 2
    assert spooled[("pilake_uploader_spool_bytes", ())] >= bundle_bytes > 0
    n_chunks = sum(len(m) for m in messages.values())
    n_bytes = sum(len(x) for m in messages.values() for x in m)
    assert delta(before, sent, "pilake_uploader_episodes_sent_total") == 4  # two sends of two
    assert delta(before, sent, "pilake_uploader_episodes_resent_total") == 2
    assert delta(before, sent, "pilake_uploader_chunks_sent_total") == 2 * n_chunks
    assert delta(before, sent, "pilake_uploader_bytes_sent_total") == 2 * n_bytes
    assert delta(before, after, "pilake_uploader_episodes_acked_total", status="committed") == 1
    assert delta(before, after, "pilake_uploader_episodes_acked_total", status="quarantined") == 1
    # this test's spool is empty now; other live spools of the process may still hold episodes
    assert (
        after[("pilake_uploader_spool_bytes", ())]
        <= spooled[("pilake_uploader_spool_bytes", ())] - bundle_bytes
    )


def test_metrics_port_is_checked(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="metrics_port"):
        UploaderConfig("127.0.0.1:1", tmp_path, metrics_port=70000)
    assert "metrics_port=None" in repr(dataclasses.replace(UploaderConfig("127.0.0.1:1", tmp_path)))


def test_metrics_port_zero_is_off(tmp_path: Path) -> None:
    # 0 = off, as the settings (PILAKE_UPLOADER_METRICS_PORT=0) document for every metrics port
    config = UploaderConfig("127.0.0.1:1", tmp_path, metrics_port=0)
    assert config.metrics_port is None
    with pytest.raises(ValueError, match="metrics_port"):
        UploaderConfig("127.0.0.1:1", tmp_path, metrics_port=-1)
    with pytest.raises(ValueError, match="metrics_port"):
        UploaderConfig("127.0.0.1:1", tmp_path, metrics_port=False)


def test_acked_series_exist_at_zero_and_the_oldest_spooled_age_is_served(tmp_path: Path) -> None:
    """An uploader never acknowledged still serves pilake_uploader_episodes_acked_total (at 0),
    or PilakeUploaderNotAcknowledged's rate() has nothing to read; the age of the oldest spooled
    episode is read from the spool's bundles when scraped (0 for an empty spool)."""
    import os
    import time

    from pi_ingest import Spool
    from pi_ingest._metrics import REGISTRY, watch_spool

    def sample(name: str, **labels: str) -> float | None:
        value = REGISTRY.get_sample_value(name, labels or None)
        return None if value is None else float(value)

    for status in ("committed", "quarantined"):
        assert sample("pilake_uploader_episodes_acked_total", status=status) is not None
    spool = Spool(tmp_path / "spool")
    watch_spool(spool)
    assert sample("pilake_uploader_oldest_spooled_seconds") == 0.0
    episode = _episodes(seed=7301, count=1)[0]
    entry = spool.add(episode.episode_id, encode_episode(episode))
    from pi_format.wire import BUNDLE_SUFFIX

    bundle = tmp_path / "spool" / f"{entry.episode_id}{BUNDLE_SUFFIX}"
    hour_ago = time.time() - 3600
    os.utime(bundle, (hour_ago, hour_ago))  # spooled an hour ago
    age = sample("pilake_uploader_oldest_spooled_seconds")
    assert age is not None and 3600 <= age < 3600 + 600
