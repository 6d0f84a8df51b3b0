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

from pi_loader._errors import (
    CorruptDataError,
    HorizonTooLongError,
    LoaderStateError,
    PiLoaderError,
    ShardError,
    SnapshotDataMissingError,
    SnapshotError,
    UnknownCameraError,
    WorkerError,
)
from pi_loader.delivery._in_flight import default_num_workers
from pi_loader.delivery._loader import IdleWorkersWarning, Loader, LoaderStats
from pi_loader.order._order import ShardSpec, block_order, sample_order, shard_order
from pi_loader.reading._cache import CacheConfig, StorageError
from pi_loader.reading._damage import DamagedLakeWarning, Unreadable
from pi_loader.reading._lake import Stats
from pi_loader.reading._retry import PermanentStorageError, RetryConfig, StoreUnreachableError
from pi_loader.samples._contact_sheet import contact_sheet
from pi_loader.samples._dataset import Dataset
from pi_loader.samples._gather import collate
from pi_loader.samples._mixture import Mixture
from pi_loader.samples._spec import SampleSpec
from pi_loader.selection._agreement import HostsDisagreeError, agree, broadcast_snapshot
from pi_loader.selection._snapshot import Snapshot

__all__ = [
    "CacheConfig",
    "CorruptDataError",
    "DamagedLakeWarning",
    "Dataset",
    "HorizonTooLongError",
    "HostsDisagreeError",
    "IdleWorkersWarning",
    "Loader",
    "LoaderStateError",
    "LoaderStats",
    "MissingSketchError",
    "Mixture",
    "NormStats",
    "PermanentStorageError",
    "PiLoaderError",
    "RetryConfig",
    "SampleSpec",
    "ShardError",
    "ShardSpec",
    "Snapshot",
    "SnapshotDataMissingError",
    "SnapshotError",
    "Stats",
    "StorageError",
    "StoreUnreachableError",
    "UnknownCameraError",
    "Unreadable",
    "WorkerError",
    "agree",
    "block_order",
    "broadcast_snapshot",
    "collate",
    "contact_sheet",
    "default_num_workers",
    "sample_order",
    "shard_order",
]
