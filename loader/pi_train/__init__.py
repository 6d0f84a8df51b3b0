"""pi_train: the reference trainer of pi-lake, in torch and JAX, fed by pi_loader.

A small policy (a convolutional encoder per camera plus a proprio MLP, predicting the action
chunk) trained on a snapshot of the lake: one process or several in data parallel (torch DDP
over gloo/NCCL, `jax.distributed`), each reading its own shard of one snapshot they agree on;
checkpoints hold the model, the optimizer and every rank's loader state, so a run killed at
any moment resumes with the same batches and the same losses; on SIGTERM or at a deadline
every rank finishes its step, the run checkpoints it and exits 0; every step is timed in parts
(data wait, host-to-device, compute, other) and the run says what bounds it, and with
`metrics_port` each process serves those parts to Prometheus while it runs (`LiveMetrics`); on
an s3:// lake every host reads through its disk cache (`cache_dir`), which `stage` fills before
training.

On the training side of the tree: it imports pi_loader and pi_format only. torch, jax, flax,
optax, orbax and matplotlib are imported when a run needs them (`pip install 'pi-lake[train]'`).

Example:
    >>> from pi_train import TrainConfig, train
    >>> result = train(TrainConfig(lake=".pilake/lake", sql="SELECT episode_id FROM episodes",
    ...                            catalog=".pilake/catalog", framework="jax", steps=100))
    >>> result.summary["verdict"]
    'input-bound: 41% of step time waiting for data'
"""

from pi_train._backend import PolicyShape, make_backend
from pi_train._config import ProcessGroup, TrainConfig
from pi_train._errors import CheckpointError, EvalError, PiTrainError
from pi_train._eval_offline import EvalConfig, evaluate_checkpoint
from pi_train._eval_report import format_eval, plot_eval
from pi_train._files import read_jsonl
from pi_train._hosts import HostPlan
from pi_train._launch import launch
from pi_train._lineage import RUN_ID_ENV, LineageError, code_version, read_lineage
from pi_train._live_metrics import LiveMetrics
from pi_train._loop import TrainResult, batch_digest, train
from pi_train._normalize import Normalization, normalization_stats
from pi_train._plot import plot_timing
from pi_train._rendezvous import RendezvousError
from pi_train._split import SPLIT_SALT, held_out_ids, split_hash
from pi_train._stage import stage
from pi_train._stop import DEADLINE_ENV, StopRequest, deadline_from_env
from pi_train._timing import StepTimer, StepTimes, verdict

__all__ = [
    "DEADLINE_ENV",
    "RUN_ID_ENV",
    "SPLIT_SALT",
    "CheckpointError",
    "EvalConfig",
    "EvalError",
    "HostPlan",
    "LineageError",
    "LiveMetrics",
    "Normalization",
    "PiTrainError",
    "PolicyShape",
    "ProcessGroup",
    "RendezvousError",
    "StepTimer",
    "StepTimes",
    "StopRequest",
    "TrainConfig",
    "TrainResult",
    "batch_digest",
    "code_version",
    "deadline_from_env",
    "evaluate_checkpoint",
    "format_eval",
    "held_out_ids",
    "launch",
    "make_backend",
    "normalization_stats",
    "plot_eval",
    "plot_timing",
    "read_jsonl",
    "read_lineage",
    "split_hash",
    "stage",
    "train",
    "verdict",
]
