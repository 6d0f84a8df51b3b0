"""A lake shared by the loader tests: 5 episodes of 11 steps, two cameras of different rates."""

from __future__ import annotations

import pytest

from tests.fixtures.lake_factory import FakeLake, write_lake

LOADER_CAMERAS = ("front", "wrist")
LOADER_STEPS = 11
LOADER_EPISODES = 5


@pytest.fixture(scope="session")
def loader_lake(tmp_path_factory: pytest.TempPathFactory) -> FakeLake:
    return write_lake(
        tmp_path_factory.mktemp("loader_lake"),
        episodes=LOADER_EPISODES,
        steps=LOADER_STEPS,
        cameras=LOADER_CAMERAS,
        size=(48, 32),  # (width, height): large enough that every frame differs
    )


@pytest.fixture(scope="session")
def loader_lake_small_groups(tmp_path_factory: pytest.TempPathFactory) -> FakeLake:
    """The loader lake with its steps in row groups of 3 steps (3, 3, 3, 2 per episode), so a
    sample's steps, action chunk and frame history span row groups."""
    return write_lake(
        tmp_path_factory.mktemp("loader_lake_small_groups"),
        episodes=LOADER_EPISODES,
        steps=LOADER_STEPS,
        cameras=LOADER_CAMERAS,
        size=(48, 32),
        steps_group_steps=3,
    )


@pytest.fixture(autouse=True)
def _own_chunk_index_directory(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each test gets its own host-wide chunk index directory (pi_loader.reading._chunk_index: under the
    temp directory for a local lake), so what a test counts does not depend on which tests ran
    before it on the same session lake."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path_factory.mktemp("tmpdir")))
