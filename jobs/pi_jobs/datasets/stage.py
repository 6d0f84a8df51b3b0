"""`pilake dataset stage PIN --cache DIR`: fill a training host's loader cache with what a pin's
samples need, before training (issue 33 item 2).

It is the trainer's own staging pass (`pi_train._stage.stage`, what `pilake train --stage`
runs), given the pin and the cache directly, with a progress bar: every sample of the pin is
read once through `pi_loader`'s host-wide disk cache, which downloads each file a sample needs
(whole) and checks the CRC of every page it reads (decision 10). A loader opened on the same pin
and cache afterwards fetches no data file from the object store (its cache counts no miss;
`tests/jobs/test_dataset_copy.py` counts it). A local lake is read in place: there is nothing
to stage.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from typing import Any, TextIO

from pi_jobs.datasets._progress import Progress


@dataclass(frozen=True, slots=True)
class StageOptions:
    """How staging reads.

    Example:
        >>> StageOptions(cache_gib=500, workers=8)
    """

    # The cache's size limit; it must hold the pin or the LRU evicts files staging just fetched.
    cache_gib: float = 100.0
    # Loader worker processes (None: the trainer's default for this host).
    workers: int | None = None
    # Samples per read batch: staging decodes, so a batch is what one worker holds at once.
    batch_size: int = 32

    def __post_init__(self) -> None:
        if isinstance(self.cache_gib, bool) or not isinstance(self.cache_gib, int | float):
            raise TypeError(f"cache_gib must be a number of GiB, got {type(self.cache_gib).__name__}")
        if not 0 < self.cache_gib < float("inf"):
            raise ValueError(f"cache_gib must be a number of GiB > 0, got {self.cache_gib!r}")
        if self.workers is not None and (isinstance(self.workers, bool) or not 0 <= self.workers <= 256):
            raise ValueError(f"workers must be None or in [0, 256], got {self.workers!r}")
        if isinstance(self.batch_size, bool) or not 1 <= self.batch_size <= 65536:
            raise ValueError(f"batch_size must be in [1, 65536], got {self.batch_size!r}")


def stage_dataset(
    lake: str,
    name: str,
    cache_dir: str,
    *,
    options: StageOptions | None = None,
    catalog: str | None = None,
    progress_out: TextIO | None = None,
    show_progress: bool = True,
) -> dict[str, Any]:
    """Read every sample of pin `name` of `lake` once through the loader cache at `cache_dir`.

    Args:
        lake: the lake (an s3:// lake is what needs staging).
        name: the dataset pin.
        cache_dir: the host's loader cache (the trainer's --cache-dir).
        options: cache size, workers, batch size (`StageOptions`).
        catalog: the installation's catalog (not read for a pin of the lake).
        progress_out: where the progress line goes (stderr by default).
        show_progress: False for no progress line.

    Returns:
        {"samples", "episodes", "seconds", "cache_dir"} (`pi_train._stage.stage`'s report).

    Raises:
        ValueError: a bad pin name or options.
        LakeError: no pin of that name in the lake (the message lists the pins).
        pi_loader errors: a selection that cannot be read.

    Example:
        >>> stage_dataset("s3://lake/prod", "pick-v3", "/nvme/pilake-cache")["samples"]
        120000
    """
    from pi_format import LakeLayout
    from pi_format.lake import PinStore
    from pi_format.lake.pins import check_pin_name
    from pi_train import TrainConfig
    from pi_train._stage import stage

    check_pin_name(name)
    options = options or StageOptions()
    PinStore(LakeLayout(lake)).get(name)  # an unknown pin: LakeError listing the lake's pins
    bar: list[Progress] = []

    def on_batch(samples: int, total: int) -> None:
        if not show_progress:
            return
        if not bar:
            bar.append(Progress(f"stage {name}", total=total, unit="samples", out=progress_out))
        bar[0].advance(samples)

    with tempfile.TemporaryDirectory(prefix="pilake-stage-") as out:
        config = TrainConfig(
            lake=lake,
            dataset=name,
            # TrainConfig wants a catalog with a dataset name (a name may be a catalog snapshot);
            # this one is a pin of the lake, checked above, which Dataset finds without it
            catalog=catalog or "(unused: a pin of the lake)",
            out_dir=out,  # staging writes nothing there: a run's directory is not needed
            batch_size=options.batch_size,
            workers=options.workers,
            action_horizon=1,  # every episode fits; the cache holds whole files either way
            cache_dir=cache_dir,
            cache_gib=options.cache_gib,
            plot=False,
        )
        report = stage(config, on_batch=on_batch)
    if bar:
        bar[0].close()
    return report
