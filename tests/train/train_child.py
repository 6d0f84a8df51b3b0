"""Child process of the trainer tests: `python -m tests.train.train_child CONFIG.json [HANG_AT]`.

Trains as `python -m pi_train CONFIG.json` does; with HANG_AT it stops after that step (its log
line written, its checkpoint if due taken, the loader's next batches in flight in its workers)
and waits there until the parent SIGKILLs it, as a preempted training job would be.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from pi_train import TrainConfig, train


def main(argv: list[str]) -> None:
    config = TrainConfig.from_json(Path(argv[0]).read_text())
    hang_at = int(argv[1]) if len(argv) > 1 else 0

    def on_step(step: int, loss: float) -> None:
        while hang_at and step == hang_at:
            time.sleep(1.0)  # waiting to be killed

    train(config, on_step=on_step)


if __name__ == "__main__":
    main(sys.argv[1:])
