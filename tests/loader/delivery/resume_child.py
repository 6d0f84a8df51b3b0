"""Child process of test_resume: iterate a Loader, log each batch and the state after it.

Run as `python -m tests.loader.delivery.resume_child SNAPSHOT LOG STOP_AFTER [STATE_JSON]`. Each line of
LOG is {"ids": [[episode_id, step], ...], "state": {...}}, written and fsynced before the next
batch is asked for. After STOP_AFTER batches (0: never) it hangs with batches still in flight in
its workers, as a training step would, until the parent SIGKILLs it.
"""

from __future__ import annotations

import json
import os
import sys
import time

from pi_loader import Dataset, Loader, SampleSpec, ShardSpec, Snapshot

BATCH = 3


def make_loader(snapshot_path: str) -> Loader:
    snap = Snapshot.load(snapshot_path)
    ds = Dataset(snap.lake_root, snapshot=snap, spec=SampleSpec(cameras=("wrist",), action_horizon=2), seed=4)
    return Loader(
        ds, batch_size=BATCH, shard=ShardSpec(1, 2), num_workers=2, prefetch_batches=3, block_size=3
    )


def main(argv: list[str]) -> None:
    snapshot_path, log_path, stop_after = argv[0], argv[1], int(argv[2])
    loader = make_loader(snapshot_path)
    if len(argv) > 3:
        with open(argv[3]) as f:
            loader.set_state(json.load(f))
    written = 0
    with open(log_path, "a") as log:
        for _ in range(2):  # two epochs: the kill may land in either
            for batch in loader:
                ids = [[str(e), int(s)] for e, s in zip(batch["episode_id"], batch["step"], strict=True)]
                log.write(json.dumps({"ids": ids, "state": loader.get_state()}) + "\n")
                log.flush()
                os.fsync(log.fileno())
                written += 1
                while written == stop_after:
                    time.sleep(1.0)  # waiting to be killed
    loader.close()


if __name__ == "__main__":
    main(sys.argv[1:])
