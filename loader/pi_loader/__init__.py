"""pi_loader: training samples from the lake, in a deterministic shuffled order.

Light on import (no torch, jax, grain, pyflink or Kafka client); chdb/clickhouse-connect load
only when a dataset is selected with SQL, Pillow only for resizing and `contact_sheet`.

Example:
    >>> from pi_loader import Dataset, Loader, SampleSpec, ShardSpec
    >>> ds = Dataset("/data/lake", sql="SELECT episode_id FROM episodes", catalog="/data/catalog",
    ...              spec=SampleSpec(cameras=("front",), action_horizon=50), seed=3)
    >>> loader = Loader(ds, batch_size=32, shard=ShardSpec.auto(), num_workers=2)
    >>> for batch in loader: ...          # dicts of numpy arrays; loader.get_state() resumes
"""

from pi_format.stats import MissingSketchError, NormStats

from pi_loader._agreement import HostsDisagreeError, agree, broadcast_snapshot
from pi_loader._cache import CacheConfig, StorageError
from pi_loader._contact_sheet import contact_sheet
from pi_loader._dataset import Dataset
from pi_loader._errors import (
    HorizonTooLongError,
    LoaderStateError,
    PiLoaderError,
    ShardError,
    SnapshotDataMissingError,
    SnapshotError,
    UnknownCameraError,
    WorkerError,
)
from pi_loader._gather import collate
from pi_loader._lake import Stats
from pi_loader._loader import Loader, LoaderStats
from pi_loader._order import ShardSpec, block_order, sample_order, shard_order
from pi_loader._snapshot import Snapshot
from pi_loader._spec import SampleSpec

__all__ = [
    "CacheConfig",
    "Dataset",
    "HorizonTooLongError",
    "HostsDisagreeError",
    "Loader",
    "LoaderStateError",
    "LoaderStats",
    "MissingSketchError",
    "NormStats",
    "PiLoaderError",
    "SampleSpec",
    "ShardError",
    "ShardSpec",
    "Snapshot",
    "SnapshotDataMissingError",
    "SnapshotError",
    "Stats",
    "StorageError",
    "UnknownCameraError",
    "WorkerError",
    "agree",
    "block_order",
    "broadcast_snapshot",
    "collate",
    "contact_sheet",
    "sample_order",
    "shard_order",
]
