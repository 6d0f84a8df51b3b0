#!/usr/bin/env bash
# Builds the peers' own virtual environment for benchmarks/loader (their pins differ from ours).
#
#   bash benchmarks/loader/setup_peers.sh        # creates benchmarks/loader/.venv-peers
#
# lerobot 0.4.4 pins torch<2.11 and torchvision<0.26, but the only CPU torch here is the local
# torch 2.13.0 wheel (any other torch pulls GBs of CUDA wheels). So: torch 2.13.0 first, then
# lerobot / mosaicml-streaming / torchvision / torchcodec with --no-deps, then the rest of their
# dependencies resolved with torch pinned. torchvision 0.28 (the one built for torch 2.13) no
# longer has torchvision.io.VideoReader, which lerobot's "pyav" backend needs, so lerobot reads
# video with its default backend, torchcodec (0.13, the release for torch 2.13), which loads the
# system FFmpeg libraries (Debian's). torchvision 0.28's C++ ops are linked against CUDA torch and
# do not load; peers/_compat.py lets `import torchvision` finish without them.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="${PEERS_VENV:-$HERE/.venv-peers}"
PY="${PYTHON:-python3.11}"
TORCHCODEC="${TORCHCODEC_VERSION:-0.13.0}"

if ! ldconfig -p | grep -q 'libavcodec\.so'; then
  echo "installing FFmpeg shared libraries for torchcodec (apt)"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    libavcodec59 libavformat59 libavutil57 libswscale6 libswresample4 libavdevice59 libavfilter8 >/dev/null
fi
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip install -q)
"${PIP[@]}" torch==2.13.0
"${PIP[@]}" --no-deps lerobot==0.4.4 mosaicml-streaming==0.13.0 torchvision==0.28.0 "torchcodec==$TORCHCODEC"
CONSTRAINTS="$(mktemp)"
trap 'rm -f "$CONSTRAINTS"' EXIT
printf 'torch==2.13.0\ntorchvision==0.28.0\n' >"$CONSTRAINTS"
# lerobot's dataset-side dependencies (its robot, sim, logging and policy extras are not needed
# to write and read a LeRobotDataset), then mosaicml-streaming's own list.
"${PIP[@]}" -c "$CONSTRAINTS" \
  "datasets>=4.0.0,<5.0.0" "huggingface-hub[hf-transfer]>=0.34.2,<0.36.0" "accelerate>=1.10.0,<2.0.0" \
  "einops>=0.8.0,<0.9.0" "av>=15.0.0,<16.0.0" "jsonlines>=4.0.0,<5.0.0" "packaging>=24.2,<26.0" \
  "draccus==0.10.0" "deepdiff>=7.0.1,<9.0.0" "termcolor>=2.4.0,<4.0.0" "imageio>=2.34.0,<3.0.0" \
  "opencv-python-headless>=4.9.0,<4.13.0" "setuptools>=71.0.0,<81.0.0" pillow psutil \
  "boto3>=1.21.45,<2" "Brotli>=1.0.9" "google-cloud-storage>=2.9.0,<3.3.0" "matplotlib>=3.5.2,<4" \
  "numpy>=1.21.5,<2.2.0" "paramiko>=2.11.0,<4" "python-snappy>=0.6.1,<1" "tqdm>=4.64.0,<5" \
  "transformers>=4.21.3,<5" "xxhash>=3.0.0,<4" "zstd>=1.5.2.5,<2" "oci>=2.88,<3" \
  "azure-storage-blob>=12.0.0,<13" "azure-storage-file-datalake>=12.11.0,<13" "azure-identity>=1.13.0" \
  "catalogue>=2,<3"
# The import check runs the legs' torchvision shim (peers/_compat.py explains why it is needed).
(cd "$HERE/peers" && "$VENV/bin/python" - <<'PY'
import _compat
_compat.patch_torchvision()
import torch, torchcodec, lerobot, streaming
from torchcodec.decoders import VideoDecoder  # fails here when torchcodec does not match torch
from lerobot.datasets.lerobot_dataset import LeRobotDataset  # noqa: F401
from streaming import MDSWriter, StreamingDataset  # noqa: F401
print(f"peers ready: torch {torch.__version__}, torchcodec {torchcodec.__version__}, "
      f"lerobot {lerobot.__version__}, streaming {streaming.__version__}")
PY
)
