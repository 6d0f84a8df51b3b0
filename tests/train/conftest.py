"""A lake shared by the trainer tests: 4 episodes of 12 steps, two cameras of 32x32 frames.

48 samples: two ranks get 24 each, 6 batches of 4, so an epoch divides evenly and the
"every sample exactly once" check of the two-process tests needs no padding or dropping.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.lake_factory import FakeLake, write_lake

TRAIN_EPISODES = 4
TRAIN_STEPS = 12
TRAIN_CAMERAS = ("front", "wrist")
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def train_lake(tmp_path_factory: pytest.TempPathFactory) -> FakeLake:
    return write_lake(
        tmp_path_factory.mktemp("train_lake"),
        episodes=TRAIN_EPISODES,
        steps=TRAIN_STEPS,
        cameras=TRAIN_CAMERAS,
        size=(32, 32),  # (width, height): >= 20 px, the reference encoder's receptive field
        garbage_attempt=False,
    )


def child_env() -> dict[str, str]:
    """The environment of a training subprocess: one BLAS thread, this repository importable."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", PYTHONPATH=str(REPO))
    env.pop("RANK", None)
    env.pop("WORLD_SIZE", None)
    return env


def run_child(config_path: Path, *extra: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """Run `python -m tests.train.train_child CONFIG [HANG_AT]` to completion."""
    return subprocess.run(
        [sys.executable, "-m", "tests.train.train_child", str(config_path), *extra],
        cwd=REPO,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
