"""The loader benchmark's legs, run the way the benchmark runs them: each in its own process
(`python -m benchmarks.loader._legs LEG ...`) on a small lake from the factory, its figures read
from the one result line it prints. The figures rest on what is checked here: the measuring
loop's counts, the lake read (committed attempts only), the raw limit's decoding, and the shape
of what pi_loader hands out. No timing asserts.

Tests never import `benchmarks` (pyproject's import contracts): they run its commands, as a user
would. The peers (lerobot, Mosaic) run in their own venv and are exercised by the benchmark itself.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.lake_factory import FakeLake, write_lake

ROOT = Path(__file__).resolve().parents[2]
RESULT_PREFIX = "LEG-RESULT "  # the line a leg prints its figures on (benchmarks/loader/_timing.py)
CAMERAS = ("front", "wrist")
EPISODES, STEPS = 3, 12
WARMUP_BATCHES = 2
# Legs as run.py runs them (its LOADERS of the same names), on this lake; batches of 4 divide its
# 36 samples. One process per leg costs its imports (about 1.5 s of CPU for a raw leg, 4.5 s for a
# pi_loader leg, which imports torch): these take each path of the raw leg's decoding (one
# frame at a time, decoders in an LRU) and pi_loader with every option the benchmark passes it
# (its Loader's batches through a torch DataLoader too).
LEGS: dict[str, list[str]] = {
    "raw_numpy": ["raw", "--workers", "1", "--batch-size", "4"],
    "raw_cached": ["raw", "--workers", "1", "--batch-size", "4", "--rgb24", "--chunk-cache", "4"],
    "pi_loader_lean": ["pi_loader", "--workers", "0", "--batch-size", "5", "--horizon", "4", "--lean"],
    "pi_loader_torch_batches": [
        *("pi_loader", "--workers", "1", "--batch-size", "6", "--horizon", "4", "--api", "torch_batches"),
    ],
}


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> FakeLake:
    root = tmp_path_factory.mktemp("bench-lake")
    return write_lake(root / "lake", episodes=EPISODES, steps=STEPS, cameras=CAMERAS, size=(32, 32))


@pytest.fixture(scope="module")
def leg_runs(lake: FakeLake) -> Iterator[dict[str, subprocess.Popen[str]]]:
    """Every leg started at once (independent processes, so the module takes about as long as
    the slowest); each test waits for the one it reads."""
    procs = {
        name: subprocess.Popen(
            [
                *(sys.executable, "-m", "benchmarks.loader._legs", *args, "--lake", lake.layout.root),
                *("--warmup-batches", str(WARMUP_BATCHES), "--measure-s", "0.5"),
            ],
            cwd=ROOT,
            env=_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for name, args in LEGS.items()
    }
    yield procs
    for proc in procs.values():
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def leg_result(leg_runs: dict[str, subprocess.Popen[str]], name: str) -> dict[str, Any]:
    """The figures leg `name` printed; fails with its output when it printed none."""
    out, _ = leg_runs[name].communicate(timeout=300)
    lines = [line for line in out.splitlines() if line.startswith(RESULT_PREFIX)]
    code = leg_runs[name].returncode
    assert code == 0 and len(lines) == 1, f"{name} leg: exit {code}\n{out[-3000:]}"
    result: dict[str, Any] = json.loads(lines[0][len(RESULT_PREFIX) :])
    return result


def test_measuring_loop_counts_warmup_then_window_and_restarts_epochs(
    leg_runs: dict[str, subprocess.Popen[str]],
) -> None:
    r = leg_result(leg_runs, "raw_numpy")
    batch, per_epoch = 4, EPISODES * STEPS // 4
    assert r["warmup_samples"] == WARMUP_BATCHES * batch
    assert r["measured_samples"] > 0 and r["measured_samples"] % batch == 0
    # the window goes on into new epochs: one restart per 9 batches taken (warm-up included),
    # less one when the window closed right at an epoch's end
    taken = (r["warmup_samples"] + r["measured_samples"]) // batch
    assert taken > per_epoch, "the window must run past the first epoch"
    assert (taken - 1) // per_epoch <= r["epochs_started_while_measuring"] <= taken // per_epoch
    assert r["samples_per_s"] > 0 and r["measured_s"] >= 0.5
    assert r["cpu_ms_per_sample"] is not None and r["cpu_ms_per_sample"] >= 0
    assert 0 <= r["open_s"] <= r["first_batch_from_spawn_s"]


@pytest.mark.parametrize(
    ("leg", "decodes_per_sample", "rgb"),
    [
        # without a cache every camera of every sample is its own decode: 2 cameras, 2 decodes
        ("raw_numpy", (2.0, 2.0), "pi_format.video.yuv420p_to_rgb"),
        # decoders kept in an LRU of 4: fewer, never more
        ("raw_cached", (0.001, 2.0), "PyAV rgb24 (swscale)"),
    ],
)
def test_raw_leg_reads_committed_episodes_and_decodes_every_camera(
    leg_runs: dict[str, subprocess.Popen[str]], leg: str, decodes_per_sample: tuple[float, float], rgb: str
) -> None:
    r = leg_result(leg_runs, leg)
    assert r["dataset_samples"] == EPISODES * STEPS  # the factory's garbage attempts left out
    low, high = decodes_per_sample
    assert low <= r["decoded_chunks_per_sample"] <= high
    assert r["rgb"] == rgb


def test_pi_loader_leg_yields_full_samples(leg_runs: dict[str, subprocess.Popen[str]]) -> None:
    r = leg_result(leg_runs, "pi_loader_lean")
    assert r["dataset_samples"] == EPISODES * STEPS
    assert r["api"] == "pi_loader.Loader (prefetch_batches=1, chunk/episode caches 4)"
    shapes = r["first_batch"]
    for camera in CAMERAS:
        assert shapes[f"observation.images.{camera}"] == [5, 32, 32, 3]
    assert shapes["action"] == [5, 4, 2]
    assert shapes["observation.state"][0] == 5
    assert r["measured_samples"] > 0


def test_run_refuses_an_unknown_loader_before_building_anything(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.loader.run", "--loaders", "raw,nope", "--out", str(tmp_path)],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "unknown loaders ['nope']" in proc.stderr
    assert not (tmp_path / "data").exists()


def test_torch_batches_leg_hands_out_the_loaders_batches_as_tensors(
    leg_runs: dict[str, subprocess.Popen[str]],
) -> None:
    r = leg_result(leg_runs, "pi_loader_torch_batches")
    assert r["api"] == "pi_loader.adapters.torch_dataloader(pi_loader.Loader(...))"
    for camera in CAMERAS:
        assert r["first_batch"][f"observation.images.{camera}"] == [6, 32, 32, 3]
    assert r["first_batch"]["action"] == [6, 4, 2]
    assert r["measured_samples"] > 0 and r["cpu_ms_per_sample"] > 0
