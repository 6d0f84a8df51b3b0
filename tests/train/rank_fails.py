"""Child of tests/train/test_launch.py: `python -m tests.train.rank_fails CONFIG.json` exits 3 at
once as rank 1, and as any other rank waits (as a rank blocked in a rendezvous would) until it
is terminated."""

from __future__ import annotations

import os
import sys
import time

if __name__ == "__main__":
    if os.environ.get("RANK") == "1":
        sys.exit(3)
    time.sleep(600)
