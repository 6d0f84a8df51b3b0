"""The loader's Prometheus metrics: off (nothing imported) unless asked; when asked, an HTTP
scrape after reading the session lake (tests/loader/conftest.py) reports what the loader did."""

from __future__ import annotations

import subprocess
import sys

import pytest
from pi_loader import Dataset, Loader, PiLoaderError, SampleSpec, ShardSpec

from tests.conftest import _free_port
from tests.fixtures.lake_factory import FakeLake
from tests.fixtures.metrics_scrape import scrape
from tests.loader.conftest import LOADER_EPISODES, LOADER_STEPS

N = LOADER_EPISODES * LOADER_STEPS


def test_off_by_default_imports_nothing(loader_lake: FakeLake) -> None:
    # a fresh interpreter: the test process itself has imported prometheus_client already
    code = (
        "import os, sys\n"
        "os.environ.pop('PILAKE_LOADER_METRICS_PORT', None)\n"
        "from pi_loader import Dataset, Loader, SampleSpec, ShardSpec\n"
        f"ds = Dataset({str(loader_lake.layout.root)!r},\n"
        "             spec=SampleSpec(cameras=('wrist',), action_horizon=3))\n"
        "n = sum(len(b['step']) for b in Loader(ds, batch_size=8, shard=ShardSpec(0, 1)))\n"
        "assert n > 0, n\n"
        "bad = [m for m in ('prometheus_client', 'pi_loader.delivery._metrics') if m in sys.modules]\n"
        "assert not bad, bad\n"
        "print('ok', n)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.startswith("ok")


def test_scrape_reports_what_the_loader_did(loader_lake: FakeLake) -> None:
    from pi_loader.delivery._metrics import served_port

    ds = Dataset(loader_lake.layout, spec=SampleSpec(cameras=("wrist",), action_horizon=3), seed=3)
    port = _free_port()
    with Loader(
        ds, batch_size=5, num_workers=1, prefetch_batches=2, shard=ShardSpec(0, 1), metrics_port=port
    ) as loader:
        port = served_port() or port  # one endpoint per process: an earlier loader may have chosen it
        before = scrape(port)
        depths = []
        for _ in loader:
            s = scrape(port)  # mid-iteration: the prefetch gauges stay within their bounds
            depths.append(
                (
                    s[("pilake_loader_prefetch_ready_batches", ())],
                    s[("pilake_loader_prefetch_in_flight_batches", ())],
                )
            )
        after = scrape(port)
        stats = loader.stats()

    def delta(name: str, **labels: str) -> float:
        key = (name, tuple(sorted(labels.items())))
        return after[key] - before.get(key, 0.0)

    assert stats.samples == N
    assert delta("pilake_loader_samples_total") == N
    assert delta("pilake_loader_batches_total") == stats.batches == -(-N // 5)
    assert delta("pilake_loader_bytes_read_total") == stats.bytes_read > 0
    assert delta("pilake_loader_video_reads_total") == stats.video_reads > 0
    assert delta("pilake_loader_steps_reads_total") == stats.steps_reads > 0
    assert all(0 <= ready <= 2 and 0 <= in_flight <= 2 for ready, in_flight in depths), depths
    # with only this loader alive the ratios are its own: 1 - reads / lookups (one camera, one frame)
    if before[("pilake_loader_samples_total", ())] == 0:
        ratio = after[("pilake_loader_cache_hit_ratio", (("cache", "video_chunks"),))]
        assert ratio == pytest.approx(1 - stats.video_reads / N)
        # one row group per episode here: at most one lookup per sample (a batch's samples of
        # one episode share theirs)
        assert 0 < stats.steps_reads <= stats.steps_lookups <= N
        assert after[("pilake_loader_cache_hit_ratio", (("cache", "steps"),))] == pytest.approx(
            1 - stats.steps_reads / stats.steps_lookups
        )
    assert after[("pilake_loader_samples_per_second", ())] >= 0


def test_bad_port_setting_is_a_clear_error(loader_lake: FakeLake, monkeypatch: pytest.MonkeyPatch) -> None:
    from pi_loader.delivery import _metrics

    monkeypatch.setenv("PILAKE_LOADER_METRICS_PORT", "9480-9470")
    monkeypatch.setattr(_metrics, "_served", {})  # as in a process that serves nothing yet
    ds = Dataset(loader_lake.layout, spec=SampleSpec(cameras=("wrist",), action_horizon=3))
    with pytest.raises(PiLoaderError, match="PILAKE_LOADER_METRICS_PORT must be a port or a range"):
        Loader(ds, batch_size=4, shard=ShardSpec(0, 1))


def test_port_zero_means_off_in_the_variable_and_the_argument(loader_lake: FakeLake) -> None:
    # issue 31: PILAKE_LOADER_METRICS_PORT=0, documented as "0 = off", raised PiLoaderError (and
    # `pilake demo` failed at its loader step). A fresh interpreter, so "nothing imported" holds.
    code = (
        "import os, sys\n"
        "from pi_loader import Dataset, Loader, SampleSpec, ShardSpec\n"
        f"ds = Dataset({str(loader_lake.layout.root)!r},\n"
        "             spec=SampleSpec(cameras=('wrist',), action_horizon=3))\n"
        "for value in ('0', ' 0 ', ''):\n"
        "    os.environ['PILAKE_LOADER_METRICS_PORT'] = value\n"
        "    n = sum(len(b['step']) for b in Loader(ds, batch_size=8, shard=ShardSpec(0, 1)))\n"
        "    assert n > 0, (value, n)\n"
        "# the argument 0 is off even when the variable names a port\n"
        "os.environ['PILAKE_LOADER_METRICS_PORT'] = '9480-9487'\n"
        "Loader(ds, batch_size=8, shard=ShardSpec(0, 1), metrics_port=0)\n"
        "bad = [m for m in ('prometheus_client', 'pi_loader.delivery._metrics') if m in sys.modules]\n"
        "assert not bad, bad\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.startswith("ok")


@pytest.mark.parametrize("value", ["-1", "0-5", "off", "9480-"])
def test_a_bad_port_other_than_zero_is_still_refused(
    value: str, loader_lake: FakeLake, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pi_loader.delivery import _metrics

    monkeypatch.setenv("PILAKE_LOADER_METRICS_PORT", value)
    monkeypatch.setattr(_metrics, "_served", {})
    ds = Dataset(loader_lake.layout, spec=SampleSpec(cameras=("wrist",), action_horizon=3))
    with pytest.raises(PiLoaderError, match="PILAKE_LOADER_METRICS_PORT must be a port or a range"):
        Loader(ds, batch_size=4, shard=ShardSpec(0, 1))


def test_wait_counts_the_consumers_blocked_time_only(
    loader_lake: FakeLake, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pilake_loader_wait_seconds_total (PilakeLoaderStarved's signal) counts the time a consumer
    is blocked in next(), the wait in progress included, and nothing while it works on a batch."""
    import threading
    import time

    from pi_loader.delivery._metrics import served_port

    ds = Dataset(loader_lake.layout, spec=SampleSpec(cameras=("wrist",), action_horizon=3), seed=4)
    port = _free_port()
    with Loader(ds, batch_size=4, num_workers=0, shard=ShardSpec(0, 1), metrics_port=port) as loader:
        port = served_port() or port
        assert loader.stats().wait_seconds == 0.0  # nothing asked yet
        it = iter(loader)
        next(it)
        first = loader.stats().wait_seconds
        assert first > 0.0
        time.sleep(0.05)  # the "training step": the consumer is not waiting
        assert loader.stats().wait_seconds == first
        # a read that blocks (the store frozen): the wait in progress is counted while it lasts
        release = threading.Event()
        real = ds.samples

        def blocked(indices: object) -> object:
            release.wait(60)
            return real(indices)  # type: ignore[arg-type]

        monkeypatch.setattr(ds, "samples", blocked)
        got: list[object] = []
        thread = threading.Thread(target=lambda: got.append(next(it)), daemon=True)
        thread.start()
        time.sleep(0.05)
        during = loader.stats().wait_seconds
        time.sleep(0.05)
        # the scrape sums this loader's and any other live one's waits
        scraped = scrape(port)[("pilake_loader_wait_seconds_total", ())]
        later = loader.stats().wait_seconds
        assert first < during < scraped and during < later  # grows while blocked, no batch out
        assert loader.stats().batches == 1
        release.set()
        thread.join(60)
        assert got and loader.stats().batches == 2
        done = loader.stats().wait_seconds
        time.sleep(0.05)
        assert loader.stats().wait_seconds == done >= later
        it.close()  # type: ignore[attr-defined]  # a generator: the consumer leaves mid-epoch
        assert loader.stats().wait_seconds == done
