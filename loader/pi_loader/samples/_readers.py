"""The reader stack a Dataset samples through, built from its selection: one RowGroupReader
(and footer cache) shared by a StepsReader and a VideoFrames, both reading footer-free through
this host's file indexes, under one SampleGather."""

from __future__ import annotations

from dataclasses import dataclass

from pi_format import LakeLayout

from pi_loader.reading._chunk_index import ChunkIndex
from pi_loader.reading._lake import Stats
from pi_loader.reading._locators import EpisodeLocators
from pi_loader.reading._packed import PackedStrings
from pi_loader.reading._row_groups import RowGroupReader
from pi_loader.reading._steps import StepsReader
from pi_loader.reading._steps_index import StepsIndex
from pi_loader.reading._storage import Storage
from pi_loader.reading._video import VideoFrames
from pi_loader.samples._gather import SampleGather
from pi_loader.samples._sample_index import SampleIndex
from pi_loader.samples._spec import SampleSpec
from pi_loader.selection._selection import Selection


@dataclass(frozen=True, slots=True)
class CacheSizes:
    """The per-process bounds of a Dataset's caches (each an int >= 1).

    Example:
        >>> CacheSizes(chunk_cache_size=64, episode_cache_size=32, steps_cache_bytes=2**26,
        ...            footer_cache_bytes=2**24)
    """

    chunk_cache_size: int
    episode_cache_size: int
    steps_cache_bytes: int
    footer_cache_bytes: int

    def __post_init__(self) -> None:
        for name in self.__slots__:
            size = getattr(self, name)
            if isinstance(size, bool) or not isinstance(size, int) or size < 1:
                raise ValueError(f"{name} must be an int >= 1, got {size!r}")


@dataclass(frozen=True, slots=True)
class Readers:
    """What `build_readers` gives a Dataset."""

    gather: SampleGather
    reader: RowGroupReader
    # the ids the readers index, packed: two buffers per copy of the Dataset rather than
    # 2 x episodes Python strings pickled into every worker (pi_loader.reading._packed)
    episode_ids: PackedStrings
    attempt_ids: PackedStrings


def build_readers(
    selection: Selection,
    *,
    layout: LakeLayout,
    storage: Storage,
    spec: SampleSpec,
    index: SampleIndex,
    stats: dict[str, Stats],
    index_directory: str,
    sizes: CacheSizes,
) -> Readers:
    """The SampleGather of `selection` with `spec` (cameras resolved)."""
    cameras = spec.cameras or ()
    locators = EpisodeLocators.from_rows(selection.rows, layout, cameras)
    reader = RowGroupReader(storage, footer_cache_bytes=sizes.footer_cache_bytes)
    versions = selection.snapshot.table_versions
    episode_ids = PackedStrings.from_arrow(selection.rows.column("episode_id"))
    attempt_ids = PackedStrings.from_arrow(selection.rows.column("attempt_id"))
    gather = SampleGather(
        spec=spec,
        index=index,
        episode_ids=episode_ids,
        attempt_ids=attempt_ids,
        episode_cameras=selection.episode_cameras,
        video_sizes=selection.video_sizes,
        locators=locators,
        stats=stats,
        steps=StepsReader(
            reader,
            locators,
            episode_ids=episode_ids,
            attempt_ids=attempt_ids,
            lengths=selection.lengths,
            camera_counts=selection.episode_cameras.counts(),
            version=versions["steps"],
            max_episodes=sizes.episode_cache_size,
            max_bytes=sizes.steps_cache_bytes,
            steps_index=StepsIndex(index_directory),
            require_crc="steps" in selection.checksummed,
        ),
        video=VideoFrames(
            reader,
            locators,
            episode_ids=episode_ids,
            attempt_ids=attempt_ids,
            cameras=cameras,
            version=versions["video"],
            chunk_cache_size=sizes.chunk_cache_size,
            chunk_index=ChunkIndex(index_directory),
        ),
    )
    return Readers(gather=gather, reader=reader, episode_ids=episode_ids, attempt_ids=attempt_ids)
