"""Mosaic `streaming` leg (runs in the peers' venv): write MDS shards from the export, or time them.

    python mosaic_leg.py build --export DIR --out DIR --horizon 50
    python mosaic_leg.py run --root DIR --workers 2 --batch-size 32 --spawned-at T

One MDS sample = one training sample, as Mosaic users lay data out: the three camera frames as
JPEG (MDSWriter's 'jpeg' encoding, PIL's default quality 75), the state, and the 50-step action
chunk precomputed at write time (padded by repeating the episode's last action, with its pad
mask). `run` reads with StreamingDataset (local shards, shuffle=True, its default py1e block
shuffle) in a torch DataLoader; JPEGs decode to uint8 HWC arrays in the workers.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

_SPAWNED = time.monotonic()
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _compat  # noqa: E402

_compat.patch_torchvision()

import numpy as np  # noqa: E402


def build(export: Path, out: Path, horizon: int) -> None:
    from PIL import Image
    from streaming import MDSWriter

    files = sorted(export.glob("*.npz"))
    first = np.load(files[0])
    cameras = [str(c) for c in first["cameras"]]
    state_dim, action_dim = first["state"].shape[1], first["action"].shape[1]
    columns = {f"observation.images.{c}": "jpeg" for c in cameras}
    columns["observation.state"] = f"ndarray:float32:{state_dim}"
    columns["action"] = f"ndarray:float32:{horizon},{action_dim}"
    columns["action_is_pad"] = f"ndarray:uint8:{horizon}"
    if out.exists():
        import shutil

        shutil.rmtree(out)
    start = time.monotonic()
    with MDSWriter(out=str(out), columns=columns, size_limit=1 << 26) as writer:
        for n, path in enumerate(files):
            ep = np.load(path)
            steps = len(ep["state"])
            frames = {c: ep[f"frames_{c}"] for c in cameras}
            for t in range(steps):
                wanted = np.arange(t, t + horizon)
                sample: dict[str, Any] = {
                    f"observation.images.{c}": Image.fromarray(frames[c][t]) for c in cameras
                }
                sample["observation.state"] = ep["state"][t]
                sample["action"] = np.ascontiguousarray(ep["action"][np.minimum(wanted, steps - 1)])
                sample["action_is_pad"] = (wanted >= steps).astype(np.uint8)
                writer.write(sample)
            print(f"  mosaic: episode {n + 1}/{len(files)} ({time.monotonic() - start:.0f} s)", flush=True)


def run(args: argparse.Namespace) -> None:
    import torch
    from _timing import measure, report, shape_of
    from streaming import StreamingDataset
    from streaming.base.util import clean_stale_shared_memory

    torch.set_num_threads(1)
    clean_stale_shared_memory()

    class Frames(StreamingDataset):  # type: ignore[misc]
        # PIL images do not collate; decode to arrays in the worker, as a transform would.
        def __getitem__(self, index: int) -> dict[str, Any]:
            sample = super().__getitem__(index)
            return {k: np.asarray(v) for k, v in sample.items()}

    ds = Frames(
        local=str(args.root),
        remote=None,
        shuffle=True,
        shuffle_seed=args.seed,
        batch_size=args.batch_size,
    )
    loader = torch.utils.data.DataLoader(
        ds, batch_size=args.batch_size, num_workers=args.workers, persistent_workers=args.workers > 0
    )
    opened = time.monotonic()
    cams = [k for k in ds.shards[0].column_names if k.startswith("observation.images.")]

    def check(batch: dict) -> dict:
        return {k: shape_of(batch[k]) for k in [*cams, "observation.state", "action"]}

    result = measure(
        lambda: loader,
        batch_len=lambda b: len(b["action"]),
        spawned_at=args.spawned_at,
        opened_at=opened,
        warmup_batches=args.warmup_batches,
        measure_s=args.measure_s,
        check=check,
    )
    result["dataset_samples"] = len(ds)
    report(result)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build")
    b.add_argument("--export", type=Path, required=True)
    b.add_argument("--out", type=Path, required=True)
    b.add_argument("--horizon", type=int, default=50)
    r = sub.add_parser("run")
    r.add_argument("--root", type=Path, required=True)
    r.add_argument("--workers", type=int, required=True)
    r.add_argument("--batch-size", type=int, default=32)
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--warmup-batches", type=int, default=3)
    r.add_argument("--measure-s", type=float, default=10.0)
    r.add_argument("--spawned-at", type=float, default=_SPAWNED)
    args = parser.parse_args()
    if args.command == "build":
        build(args.export, args.out, args.horizon)
    else:
        run(args)


if __name__ == "__main__":
    main()
