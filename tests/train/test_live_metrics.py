"""Live step-time metrics (pi_train._live_metrics): a real tiny run serves /metrics while it trains
(scraped from inside the run, between steps), serves nothing with port 0, and refuses a taken
port with a message naming it and the fix, before it opens any data."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import hypothesis
import pytest
from hypothesis import strategies as st
from pi_jobs.cli import build_parser
from pi_jobs.cli._train import train_config_from_args
from pi_jobs.settings import Settings
from pi_train import PiTrainError, ProcessGroup, TrainConfig, train
from pi_train._live_metrics import BUCKETS, LIVE_PARTS, METRIC_NAMES, metrics_port_of

from tests.conftest import _free_port
from tests.fixtures.lake_factory import FakeLake
from tests.fixtures.metrics_scrape import Samples, scrape
from tests.train.conftest import REPO, child_env


def _config(lake: FakeLake, out: Path, **options: Any) -> TrainConfig:
    return TrainConfig(
        lake=lake.layout.root,
        framework="torch",
        steps=6,
        batch_size=4,
        action_horizon=4,
        workers=0,
        out_dir=str(out),
        checkpoint_every=3,
        log_every=2,
        device="cpu",
        threads=1,
        plot=False,
        **options,
    )


def _listening_ports() -> set[int]:
    """TCP ports this process listens on (its socket inodes in /proc/net/tcp{,6}, state 0A)."""
    fds = Path("/proc/self/fd")
    inodes = set()
    for fd in fds.iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def _part(samples: Samples, suffix: str, part: str, **labels: str) -> float:
    key = tuple(sorted({"rank": "0", "part": part, **labels}.items()))
    return samples[(f"pilake_train_step_seconds_{suffix}", key)]


def test_a_run_serves_its_step_times_while_it_trains(train_lake: FakeLake, tmp_path: Path) -> None:
    port = _free_port()
    scrapes: dict[int, Samples] = {}

    def on_step(step: int, loss: float) -> None:
        if step in (3, 5, 6):
            scrapes[step] = scrape(port)

    # one of the 4 episodes held out, scored at steps 3 and 6
    config = _config(train_lake, tmp_path / "run", metrics_port=port, eval_fraction=0.25, eval_every=3)
    result = train(config, on_step=on_step)
    assert result.step == 6
    mid, later = scrapes[3], scrapes[5]
    rank = (("rank", "0"),)
    assert mid[("pilake_train_steps_total", rank)] == 3
    assert mid[("pilake_train_step", rank)] == 3
    assert mid[("pilake_train_samples_total", rank)] == 3 * 4
    assert later[("pilake_train_steps_total", rank)] == 5
    assert mid[("pilake_train_info", (("framework", "torch"), ("rank", "0"), ("world_size", "1")))] == 1
    # the first step is the warm-up: out of the histograms, shown apart
    assert _part(mid, "count", "total") == 2 and _part(later, "count", "total") == 4
    assert mid[("pilake_train_warmup_seconds", (("part", "total"), ("rank", "0")))] > 0
    # evaluations are observed one by one (between steps, in no step's total)
    assert [_part(scrapes[s], "count", "eval") for s in (3, 5, 6)] == [1, 1, 2]
    assert _part(scrapes[6], "sum", "eval") > _part(mid, "sum", "eval") > 0
    for part in set(LIVE_PARTS) - {"eval"}:
        assert _part(later, "count", part) == 4
    for part in LIVE_PARTS:
        counts = [_part(later, "bucket", part, le=_le(b)) for b in BUCKETS]
        assert counts == sorted(counts) and counts[-1] == _part(later, "count", part), (part, counts)
    # the parts add up to the total, which grows between scrapes
    parts = sum(_part(later, "sum", p) for p in LIVE_PARTS if p not in ("total", "eval"))
    assert parts == pytest.approx(_part(later, "sum", "total"), rel=1e-6)
    assert _part(later, "sum", "total") > _part(mid, "sum", "total") > 0
    assert _part(mid, "sum", "checkpoint") > 0  # step 3 wrote a checkpoint
    assert later[("pilake_train_samples_per_second", rank)] > 0  # windows of log_every=2 steps
    assert set(METRIC_NAMES) == {_base(name) for name, _ in later if name.startswith("pilake_train_")}
    # the endpoint goes when the run ends
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5)


def _le(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(float(bound))


def _base(name: str) -> str:
    """The registered name of a served sample (a counter's `_created` is its `_total`'s)."""
    for suffix in ("_bucket", "_count", "_sum", "_created"):
        stem = name.removesuffix(suffix)
        if name.endswith(suffix) and stem in METRIC_NAMES:
            return stem
        if suffix == "_created" and name.endswith(suffix) and f"{stem}_total" in METRIC_NAMES:
            return f"{stem}_total"
    return name


def test_port_0_serves_nothing(train_lake: FakeLake, tmp_path: Path) -> None:
    before = _listening_ports()
    during: list[set[int]] = []
    config = _config(train_lake, tmp_path / "run", metrics_port=0)
    train(config, on_step=lambda step, loss: during.append(_listening_ports()))
    assert during and all(ports == before for ports in during)


def test_a_taken_port_is_a_clear_error_before_any_data_is_read(train_lake: FakeLake, tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("0.0.0.0", 0))
        holder.listen()
        port = holder.getsockname()[1]
        out = tmp_path / "run"
        with pytest.raises(PiTrainError, match=rf"port {port} \(rank 0\).*--metrics-port.*0 to serve none"):
            train(_config(train_lake, out, metrics_port=port))
    assert not (out / "snapshot.json").exists() and not (out / "checkpoints").exists()


@pytest.mark.parametrize("bad", [-1, 65536, True, 9490.0, "9490"])
def test_the_port_option_is_validated(bad: Any) -> None:
    with pytest.raises(ValueError, match="metrics_port"):
        TrainConfig(lake="lake", metrics_port=bad)


def test_each_local_rank_gets_its_own_port() -> None:
    config = TrainConfig(lake="lake", metrics_port=9490)
    assert metrics_port_of(config, ProcessGroup(rank=3, world_size=4, local_world_size=2), {}) == 9491
    assert metrics_port_of(config, ProcessGroup(rank=3, world_size=4), {"LOCAL_RANK": "0"}) == 9490
    off = TrainConfig(lake="lake")
    assert metrics_port_of(off, ProcessGroup(rank=1, world_size=2), {"LOCAL_RANK": "x"}) == 0
    for bad in ("x", "", "1e3", "\x00", "-1"):
        with pytest.raises(PiTrainError, match="LOCAL_RANK must be an integer >= 0"):
            metrics_port_of(config, ProcessGroup(), {"LOCAL_RANK": bad})
    high = TrainConfig(lake="lake", metrics_port=65535)
    with pytest.raises(PiTrainError, match="65536 is not a TCP port"):
        metrics_port_of(high, ProcessGroup(rank=1, world_size=2, local_world_size=2), {})


def test_pilake_train_takes_metrics_port(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path)
    parse = build_parser().parse_args
    assert train_config_from_args(settings, parse(["train", "--metrics-port", "9490"])).metrics_port == 9490
    assert train_config_from_args(settings, parse(["train"])).metrics_port == 0


def _two_free_ports() -> int:
    for _ in range(50):
        first = _free_port()
        with socket.socket() as s:
            try:
                s.bind(("0.0.0.0", first + 1))
            except OSError:
                continue
        return first
    raise AssertionError("no two consecutive free ports")


def test_each_process_of_a_launched_run_serves_its_rank(train_lake: FakeLake, tmp_path: Path) -> None:
    """`pilake train --nproc 2`: rank r serves on --metrics-port + r with rank="r", scraped
    while both train; SIGTERM to the launcher then stops the run at a checkpoint (exit 0)."""
    first = _two_free_ports()
    argv = [sys.executable, "-m", "pi_jobs.cli", "train", "--lake", train_lake.layout.root]
    argv += ["--batch-size", "4", "--action-horizon", "4", "--workers", "0", "--steps", "100000"]
    argv += ["--out", str(tmp_path / "run"), "--device", "cpu", "--metrics-port", str(first), "--nproc", "2"]
    proc = subprocess.Popen(argv, env=child_env(), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        seen: dict[int, Samples] = {}
        deadline = time.monotonic() + 300
        while len(seen) < 2:
            assert proc.poll() is None, proc.communicate()[0][-3000:]
            assert time.monotonic() < deadline, "the ranks never served a trained step"
            for rank in (0, 1):
                try:
                    got = scrape(first + rank)
                except OSError:
                    continue
                if got.get(("pilake_train_steps_total", (("rank", str(rank)),)), 0) >= 2:
                    seen[rank] = got
            time.sleep(0.3)
        for rank, got in seen.items():
            info = (("framework", "torch"), ("rank", str(rank)), ("world_size", "2"))
            assert got[("pilake_train_info", info)] == 1
            assert {dict(labels)["rank"] for name, labels in got if name.startswith("pilake_train_")} == {
                str(rank)
            }
        proc.send_signal(signal.SIGTERM)
        out = proc.communicate(timeout=120)[0]
        assert proc.returncode == 0, out[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@hypothesis.settings(max_examples=300, deadline=None)
@hypothesis.given(local_rank=st.text(max_size=12), base=st.integers(min_value=0, max_value=65535))
def test_any_local_rank_text_gives_a_port_or_a_clear_refusal(local_rank: str, base: int) -> None:
    config = TrainConfig(lake="lake", metrics_port=base)
    try:
        port = metrics_port_of(config, ProcessGroup(), {"LOCAL_RANK": local_rank})
    except PiTrainError as err:
        assert "LOCAL_RANK must be an integer >= 0" in str(err) or "is not a TCP port" in str(err)
        return
    assert port == 0 if base == 0 else port == base + int(local_rank) and int(local_rank) >= 0


@pytest.mark.parametrize(("text", "error"), [("70000", ValueError), ("-5", ValueError), ("abc", SystemExit)])
def test_pilake_train_refuses_a_bad_metrics_port(tmp_path: Path, text: str, error: type[Exception]) -> None:
    with pytest.raises(error):
        args = build_parser().parse_args(["train", "--metrics-port", text])
        train_config_from_args(Settings(home=tmp_path), args)
