"""`pilake dataset stage PIN --cache DIR`: fill a training host's loader cache with what a pin's
samples need, before training (issue 33 item 2), bytes only.

The pin is opened once through `pi_loader` with the cache (its Delta log, episodes rows and
pinned open land where a loader's open finds them), then every steps and video file the pin's
episodes rows locate is fetched whole into the loader's host-wide disk cache through the
loader's own `S3Storage.local_path`, many at once, with a progress bar in bytes (rate, ETA).
Nothing is decoded. The cache then holds each file in the form the loader reads first: a cold
ranged read (`S3Storage.read_range`) serves its byte ranges from the whole file when the cache
holds it. A loader opened on the same pin and cache afterwards fetches no byte from the object
store (`tests/jobs/test_dataset_copy.py` counts it). A local lake is read in place: there is
nothing to stage.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TextIO

from pi_jobs.datasets._progress import Progress


@dataclass(frozen=True, slots=True)
class StageOptions:
    """How staging fetches.

    Example:
        >>> StageOptions(cache_gib=500, workers=32)
    """

    # The cache's size limit; it must hold the pin or the LRU evicts files staging just fetched.
    cache_gib: float = 100.0
    # Files fetched at once (None: 16, enough to keep a 10 Gb/s link busy with 17 MB files; 0: one
    # at a time, in the calling thread).
    workers: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.cache_gib, bool) or not isinstance(self.cache_gib, int | float):
            raise TypeError(f"cache_gib must be a number of GiB, got {type(self.cache_gib).__name__}")
        if not 0 < self.cache_gib < float("inf"):
            raise ValueError(f"cache_gib must be a number of GiB > 0, got {self.cache_gib!r}")
        if self.workers is not None and (
            isinstance(self.workers, bool)
            or not isinstance(self.workers, int)
            or not 0 <= self.workers <= 256
        ):
            raise ValueError(f"workers must be None or an integer in [0, 256], got {self.workers!r}")


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
    """Fetch every file pin `name` of `lake` reads into the loader cache at `cache_dir`.

    Args:
        lake: the lake (an s3:// lake is what needs staging).
        name: the dataset pin.
        cache_dir: the host's loader cache (the trainer's --cache-dir).
        options: cache size, fetches in flight (`StageOptions`).
        catalog: unused (a pin of the lake is found in the lake); kept for the CLI's call.
        progress_out: where the progress line goes (stderr by default).
        show_progress: False for no progress line.

    Returns:
        {"samples", "episodes", "files", "bytes", "seconds", "cache_dir"}.

    Raises:
        ValueError: a bad pin name or options.
        LakeError: no pin of that name in the lake (the message lists the pins).
        pi_loader errors: a file that cannot be fetched (StorageError names it), a cache too
            small for a file.

    Example:
        >>> stage_dataset("s3://lake/prod", "pick-v3", "/nvme/pilake-cache")["bytes"]
        412316860
    """
    import time
    from concurrent.futures import ThreadPoolExecutor
    from pathlib import Path

    from pi_format import LakeLayout
    from pi_format.lake import PinStore
    from pi_format.lake.pins import check_pin_name
    from pi_loader import CacheConfig, Dataset, SampleSpec
    from pi_loader.reading._lake import file_uri

    from pi_jobs.datasets._rows import source_rows
    from pi_jobs.datasets.copy import _plan

    del catalog  # a pin of the lake: Dataset finds it there
    started = time.perf_counter()
    check_pin_name(name)
    options = options or StageOptions()
    layout = LakeLayout(lake)
    pin = PinStore(layout).get(name)  # an unknown pin: LakeError listing the lake's pins
    cache = CacheConfig(Path(cache_dir), int(options.cache_gib * 2**30))
    # the open a loader makes (cached for the next); a horizon of 1 fits every episode
    dataset = Dataset(lake, snapshot=name, cache=cache, spec=SampleSpec(action_horizon=1))
    storage = dataset._storage  # the loader's own: its cache keys and layout
    jobs = _plan(layout, source_rows(layout, pin))
    uris = [
        (file_uri(layout.table(j.relative.split("/", 1)[0]), j.relative.split("/", 1)[1]), j.size)
        for j in jobs
    ]
    total = sum(size for _, size in uris)
    bar = Progress(f"stage {name}", total=total, out=progress_out) if show_progress else None

    def fetch(item: tuple[str, int]) -> int:
        if hasattr(storage, "local_path"):
            storage.local_path(item[0])  # whole, into the cache (a hit when it is there)
        if bar is not None:
            bar.advance(item[1])
        return item[1]

    workers = 16 if options.workers is None else options.workers
    if workers == 0:
        fetched = sum(fetch(item) for item in uris)
    else:
        with ThreadPoolExecutor(workers, thread_name_prefix="stage") as pool:
            fetched = sum(pool.map(fetch, uris))
    if bar is not None:
        bar.close()
    return {
        "samples": len(dataset),
        "episodes": len(pin.episode_ids),
        "files": len(uris),
        "bytes": fetched,
        "seconds": round(time.perf_counter() - started, 3),
        "cache_dir": str(cache_dir),
    }
