"""Import shim for the peers' venv: lets `import torchvision` work on the CPU build of torch 2.13.

The only torch here is the local CPU build of 2.13.0; PyPI's torchvision 0.28 (the release for
torch 2.13) ships C++ ops linked against CUDA torch, which fail to load, after which its import
dies registering fake kernels for `torchvision::nms`/`qnms` ("operator does not exist"). Defining
those two schemas first lets the import finish. Neither peer calls torchvision's C++ ops:
lerobot uses `torchvision.transforms` and decodes video with torchcodec; mosaicml-streaming
imports `torchvision.datasets.VisionDataset` for its vision datasets.
"""

from __future__ import annotations

_LIBRARY = None


def patch_torchvision() -> None:
    global _LIBRARY
    import torch

    try:
        torch.ops.torchvision.nms  # noqa: B018  (present when torchvision's own ops loaded)
        return
    except (AttributeError, RuntimeError):
        pass
    if _LIBRARY is None:
        _LIBRARY = torch.library.Library("torchvision", "DEF")
        _LIBRARY.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        _LIBRARY.define("qnms(Tensor qdets, Tensor scores, float iou_threshold) -> Tensor")
