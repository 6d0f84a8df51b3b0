"""pi_loader: training samples from the lake, in a deterministic shuffled order.

Light on import (no torch, pyflink or Kafka client); chdb/clickhouse-connect load only when a
dataset is selected with SQL, Pillow only for `contact_sheet`.

Example:
    >>> from pi_loader import Dataset
    >>> ds = Dataset("/data/lake", sql="SELECT episode_id FROM episodes", catalog="/data/catalog")
    >>> torch.utils.data.DataLoader(ds, batch_size=8, num_workers=2)
"""

from pi_loader._contact_sheet import contact_sheet
from pi_loader._dataset import Dataset
from pi_loader._errors import PiLoaderError
from pi_loader._order import sample_order

__all__ = [
    "Dataset",
    "PiLoaderError",
    "contact_sheet",
    "sample_order",
]
