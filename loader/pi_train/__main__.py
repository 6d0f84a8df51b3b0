"""`python -m pi_train CONFIG.json`: one process of a run (rank from RANK / WORLD_SIZE /
MASTER_ADDR / MASTER_PORT, as `pi_train.launch` and torchrun set them)."""

from __future__ import annotations

import sys
from pathlib import Path

from pi_train._config import TrainConfig
from pi_train._errors import PiTrainError
from pi_train._loop import train


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m pi_train CONFIG.json", file=sys.stderr)
        return 2
    try:
        train(TrainConfig.from_json(Path(argv[0]).read_text()))
    except (PiTrainError, ValueError, OSError) as err:
        print(f"pi_train: error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
