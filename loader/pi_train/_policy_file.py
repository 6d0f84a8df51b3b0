"""`<out>/policy.json`: what a run's checkpoints need to be loaded again outside the run.

A checkpoint holds weights (and, for torch, the normalization buffers); building the model to
load them into needs its shape (cameras, image sizes, state and action sizes, horizon) and the
normalization (JAX keeps it outside the weights). Rank 0 writes this file when a run starts;
`pi_train.evaluate_checkpoint` reads it to score a checkpoint on another dataset.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pi_train._backend import PolicyShape
from pi_train._errors import CheckpointError
from pi_train._files import atomic_write
from pi_train._normalize import Normalization

POLICY_FORMAT = "pi_train.policy/1"
POLICY_FILE = "policy.json"


@dataclass(frozen=True, slots=True)
class PolicyRecord:
    """A run's policy: framework, shape, normalization, loss, sample options and checkpoints.

    Example:
        >>> record = PolicyRecord.load(Path("runs/train-torch/policy.json"))
        >>> record.shape.horizon
        16
    """

    framework: str
    shape: PolicyShape
    norm: Normalization
    loss: str
    image_size: tuple[int, int] | None
    checkpoints: str

    @property
    def cameras(self) -> tuple[str, ...]:
        prefix = "observation.images."
        return tuple(k[len(prefix) :] for k in self.shape.image_keys)

    def to_json(self) -> str:
        s = self.shape
        return json.dumps(
            {
                "format": POLICY_FORMAT,
                "framework": self.framework,
                "shape": {
                    "image_keys": list(s.image_keys),
                    "image_shapes": [list(x) for x in s.image_shapes],
                    "state_dim": s.state_dim,
                    "action_dim": s.action_dim,
                    "horizon": s.horizon,
                },
                "normalization": {"mode": self.norm.mode, **self.norm.to_json()},
                "loss": self.loss,
                "image_size": list(self.image_size) if self.image_size else None,
                "checkpoints": self.checkpoints,
            },
            indent=1,
        )

    def save(self, out: Path) -> None:
        text = self.to_json().encode()
        atomic_write(out / POLICY_FILE, lambda f: f.write(text))

    @classmethod
    def load(cls, path: Path) -> PolicyRecord:
        """Read a policy.json; CheckpointError for a file that is not one (names the path)."""
        try:
            data = json.loads(path.read_text())
            if data.get("format") != POLICY_FORMAT:
                raise ValueError(f"format is {data.get('format')!r}, expected {POLICY_FORMAT!r}")
            s, n = data["shape"], data["normalization"]
            shape = PolicyShape(
                image_keys=tuple(str(k) for k in s["image_keys"]),
                image_shapes=tuple(tuple(int(v) for v in x) for x in s["image_shapes"]),
                state_dim=int(s["state_dim"]),
                action_dim=int(s["action_dim"]),
                horizon=int(s["horizon"]),
            )
            norm = Normalization(
                **{
                    k: np.asarray(n[k], np.float32)
                    for k in ("state_mean", "state_std", "action_mean", "action_std")
                },
                mode=str(n["mode"]),
            )
            size = data["image_size"]
            return cls(
                framework=str(data["framework"]),
                shape=shape,
                norm=norm,
                loss=str(data["loss"]),
                image_size=(int(size[0]), int(size[1])) if size else None,
                checkpoints=str(data["checkpoints"]),
            )
        except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError) as err:
            raise CheckpointError(
                f"{path} is not a readable pi_train policy record ({err}): it is written by "
                "`pilake train` into the run's --out directory; pass that directory with --run"
            ) from err


def record_policy(config: Any, shape: PolicyShape, norm: Normalization, out: Path, rank0: bool) -> None:
    """Rank 0 writes `<out>/policy.json` for `config` (a TrainConfig)."""
    if not rank0:
        return
    PolicyRecord(
        framework=config.framework,
        shape=shape,
        norm=norm,
        loss=config.loss,
        image_size=config.image_size,
        checkpoints=str(config.checkpoints.absolute()),
    ).save(out)
