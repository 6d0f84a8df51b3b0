"""LeRobotDataset leg (runs in the peers' venv): build a v3 dataset from the export, or time it.

    python lerobot_leg.py build --export DIR --out DIR
    python lerobot_leg.py run --root DIR --workers 2 --batch-size 32 --horizon 50 --spawned-at T

`build` goes through lerobot's own recording API (LeRobotDataset.create, add_frame,
save_episode, finalize), so the videos are encoded by lerobot with its defaults (libsvtav1,
yuv420p, g=2, crf=30). `run` reads with lerobot's default backend here (torchcodec), the
50-step action chunk through `delta_timestamps`, shuffled by torch's DataLoader.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

_SPAWNED = time.monotonic()
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a local dataset: never ask the Hub

import _compat  # noqa: E402

_compat.patch_torchvision()

import numpy as np  # noqa: E402

REPO_ID = "pilake/bench"


def build(export: Path, out: Path) -> None:
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    files = sorted(export.glob("*.npz"))
    first = np.load(files[0])
    cameras = [str(c) for c in first["cameras"]]
    fps = float(first["fps"])
    if fps != int(fps):
        raise ValueError(f"LeRobotDataset needs an integer fps, the export has {fps}")
    height, width = first[f"frames_{cameras[0]}"].shape[1:3]
    features = {
        f"observation.images.{c}": {
            "dtype": "video",
            "shape": (height, width, 3),
            "names": ["height", "width", "channels"],
        }
        for c in cameras
    }
    features["observation.state"] = {"dtype": "float32", "shape": (first["state"].shape[1],), "names": None}
    features["action"] = {"dtype": "float32", "shape": (first["action"].shape[1],), "names": None}
    if out.exists():
        import shutil

        shutil.rmtree(out)
    # image_writer_threads: lerobot's own recommendation for recording (PNG writes off the loop)
    ds = LeRobotDataset.create(
        REPO_ID, fps=int(fps), features=features, root=out, use_videos=True, image_writer_threads=4
    )
    start = time.monotonic()
    for n, path in enumerate(files):
        ep = np.load(path)
        for t in range(len(ep["state"])):
            frame = {f"observation.images.{c}": ep[f"frames_{c}"][t] for c in cameras}
            frame["observation.state"] = ep["state"][t]
            frame["action"] = ep["action"][t]
            frame["task"] = "bench"
            ds.add_frame(frame)
        ds.save_episode()
        print(f"  lerobot: episode {n + 1}/{len(files)} ({time.monotonic() - start:.0f} s)", flush=True)
    ds.stop_image_writer()
    ds.finalize()


def run(args: argparse.Namespace) -> None:
    import torch
    from _timing import measure, report, shape_of
    from lerobot.datasets.lerobot_dataset import LeRobotDataset, LeRobotDatasetMetadata

    torch.set_num_threads(1)
    meta = LeRobotDatasetMetadata(REPO_ID, root=args.root)
    delta = {"action": [i / meta.fps for i in range(args.horizon)]}
    ds = LeRobotDataset(REPO_ID, root=args.root, delta_timestamps=delta, video_backend=args.backend)
    generator = torch.Generator().manual_seed(args.seed)
    loader = torch.utils.data.DataLoader(
        ds,
        batch_size=args.batch_size,
        shuffle=True,
        generator=generator,
        num_workers=args.workers,
        persistent_workers=args.workers > 0,
    )
    cams = [k for k in ds.meta.video_keys]
    opened = time.monotonic()

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
    result["video_backend"] = ds.video_backend
    report(result)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build")
    b.add_argument("--export", type=Path, required=True)
    b.add_argument("--out", type=Path, required=True)
    r = sub.add_parser("run")
    r.add_argument("--root", type=Path, required=True)
    r.add_argument("--workers", type=int, required=True)
    r.add_argument("--batch-size", type=int, default=32)
    r.add_argument("--horizon", type=int, default=50)
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--backend", default="torchcodec")
    r.add_argument("--warmup-batches", type=int, default=3)
    r.add_argument("--measure-s", type=float, default=10.0)
    r.add_argument("--spawned-at", type=float, default=_SPAWNED)
    args = parser.parse_args()
    if args.command == "build":
        build(args.export, args.out)
    else:
        run(args)


if __name__ == "__main__":
    main()
