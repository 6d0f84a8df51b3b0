"""Child of the trainer tests: `python -m tests.train.train_child CONFIG.json [HANG_AT | STEP:SECONDS]`,
or `... --launch N CONFIG.json [NNODES NODE_RANK MASTER_PORT]` (a launcher of N such children,
as `pilake train --nproc N [--nnodes --node-rank --master-port]`).

Trains as `python -m pi_train CONFIG.json` does; with HANG_AT it stops after that step (its log
line written, its checkpoint if due taken, the loader's next batches in flight in its workers)
and waits there until the parent SIGKILLs it, as a preempted training job would be. With
STEP:SECONDS it pauses that long after STEP and goes on (a slow step, to pass a deadline).
`TRAIN_CHILD_PACE_S` in the environment: a pause after every step, so that a signal sent once
a step is logged lands while the run still has steps to go (a CPU step here takes ~10 ms).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from pi_train import TrainConfig, launch, train

PACE_ENV = "TRAIN_CHILD_PACE_S"


def main(argv: list[str]) -> int:
    if argv and argv[0] == "--launch":
        config = TrainConfig.from_json(Path(argv[2]).read_text())
        # host arguments (a multi-host run, one launcher per host): NNODES NODE_RANK MASTER_PORT
        if len(argv) > 3:
            nnodes, node_rank, port = map(int, argv[3:6])
            return launch(
                config, int(argv[1]), module="tests.train.train_child", nnodes=nnodes, node_rank=node_rank,
                master_port=port,
            )  # fmt: skip
        return launch(config, int(argv[1]), module="tests.train.train_child")
    config = TrainConfig.from_json(Path(argv[0]).read_text())
    hang_at, pause_at, pause_s = 0, 0, 0.0
    if len(argv) > 1 and ":" in argv[1]:
        at, seconds = argv[1].split(":")
        pause_at, pause_s = int(at), float(seconds)
    elif len(argv) > 1:
        hang_at = int(argv[1])
    pace = float(os.environ.get(PACE_ENV, "0"))

    def on_step(step: int, loss: float) -> None:
        while hang_at and step == hang_at:
            time.sleep(1.0)  # waiting to be killed
        if pause_at and step == pause_at:
            time.sleep(pause_s)
        if pace:
            time.sleep(pace)

    train(config, on_step=on_step)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
