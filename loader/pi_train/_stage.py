"""The host's loader cache for a run, and staging: reading a run's data into it before training.

A run on an s3:// lake reads every data file through `pi_loader`'s host-wide disk cache
(`TrainConfig.cache_dir`, a local disk: the node's NVMe on a cluster; `cache_gib` bounds it), so
each file crosses the network once per host whatever the number of processes and epochs.
`stage` fills that cache before the GPUs start (`pilake train ... --stage`, the training Job's
init container): it opens the selection exactly as the run will (`--dataset PIN`, the pinned
snapshot of a resumed run, or `--sql`/`--mix`) and reads every sample of it once with the run's
loader workers, which downloads every file a sample needs and builds the host's indexes.

This is a warm-up by reading, not a copy: it decodes what it reads (one epoch of the loader's
CPU time, no GPU), and it stages the whole selection on every host (a host's shards change
with the epoch's order), so the cache must hold the selection or the LRU evicts the oldest
files. `pilake dataset stage PIN --cache DIR` (pi_jobs.datasets) runs this same pass for a pin,
with a progress bar, before any run is configured; the pages it reads are CRC-checked by the
readers (decision 10).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pi_loader import CacheConfig, Loader, Mixture, ShardSpec

from pi_train._config import TrainConfig, loader_workers

__all__ = ["cache_config", "stage"]


def cache_config(config: TrainConfig) -> CacheConfig | None:
    """The loader's disk cache of `config` (None: no `cache_dir`, a local lake needs none).

    Example:
        >>> cache_config(TrainConfig(lake="s3://b/lake", cache_dir="/nvme/pilake-cache", cache_gib=500))
        CacheConfig(directory=PosixPath('/nvme/pilake-cache'), max_size_bytes=536870912000)
    """
    if config.cache_dir is None:
        return None
    return CacheConfig(Path(config.cache_dir), max_size_bytes=int(config.cache_gib * 2**30))


def stage(config: TrainConfig, on_batch: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Read every sample of the run's selection once, through the run's cache (see the module).

    Args:
        config: the run's configuration (its selection, lake, cache and loader workers).
        on_batch: called with (samples in the batch read, samples of the whole selection) after
            each batch (`pilake dataset stage`'s progress bar).

    Returns:
        {"samples", "episodes", "seconds", "cache_dir"} of what was read.

    Raises:
        pi_loader errors: a selection that cannot be opened or read (as the run would raise).

    Example:
        >>> stage(TrainConfig(lake="s3://b/lake", dataset="pick-v1", catalog="http://ch:8123",
        ...                   cache_dir="/nvme/pilake-cache"))["samples"]
        120000
    """
    from pi_train._loop import _open_dataset

    t0 = time.perf_counter()
    ds = _open_dataset(config, Path(config.out_dir))
    sources = [source for source in ds.sources] if isinstance(ds, Mixture) else [ds]
    samples = episodes = 0
    total = sum(len(source) for source in sources)
    for source in sources:
        episodes += len(source.episode_ids)
        with Loader(
            source,
            batch_size=config.batch_size,
            shard=ShardSpec(index=0, count=1),
            num_workers=loader_workers(config),
            drop_last=False,
        ) as loader:
            for batch in loader:
                samples += len(batch["episode_id"])
                if on_batch is not None:
                    on_batch(len(batch["episode_id"]), total)
    return {
        "samples": samples,
        "episodes": episodes,
        "seconds": round(time.perf_counter() - t0, 3),
        "cache_dir": config.cache_dir,
    }
