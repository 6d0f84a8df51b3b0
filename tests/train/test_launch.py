"""`pi_train.launch`: a rank that fails stops the others, whatever its rank."""

from __future__ import annotations

from pathlib import Path

import pytest
from pi_train import TrainConfig, launch

from tests.train.conftest import child_env


@pytest.mark.timeout(120)  # rank 0 waits 600 s unless the launcher stops it
def test_a_later_rank_failing_stops_the_earlier_ones(tmp_path: Path) -> None:
    # Rank 1 exits 3 at once while rank 0 still runs: the launcher used to poll with any(...),
    # which stopped at the running rank 0 and never saw rank 1's exit (the run then waited in
    # rank 0 until its own rendezvous timeout).
    config = TrainConfig(lake=str(tmp_path / "lake"), out_dir=str(tmp_path / "run"))
    assert launch(config, 2, env=child_env(), module="tests.train.rank_fails") == 3
