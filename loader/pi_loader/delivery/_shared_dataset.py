"""A Dataset handed to worker processes once per host, not once per worker.

A Dataset's per-episode arrays (sample index, locators, packed ids, sizes: ~130 bytes per
selected episode, 13 MB at 100,000 episodes) would be pickled into every worker, each holding
its own copy. Instead the main process pickles the Dataset with protocol 5, taking every large
buffer out of band into one file in memory (`memfd_create`; a temp file where there is none)
that workers open through `/proc/<pid>/fd/<fd>` and map read-only: they unpickle the small
in-band part with the buffers as zero-copy views of the map. Every worker then reads the same
pages, so a worker's private memory no longer grows with the selection. The file lives while
the main process holds it (`SharedDatasetImage.close`, or its exit); a memfd leaves nothing
behind even after a SIGKILL.

With an `EpisodeTable` (the loader's workers), the per-episode arrays are not in the file at all:
the pickle holds a tag for each, and the worker gets each batch's rows with its task
(`_batch_episodes`), so its memory does not grow with the selection, not even in shared pages.
"""

from __future__ import annotations

import contextlib
import io
import mmap
import os
import pickle
import stat
import tempfile
from dataclasses import dataclass
from typing import Any

from pi_loader._errors import PiLoaderError
from pi_loader.delivery._batch_episodes import BatchEpisodes, EpisodeTable

# Buffers smaller than this stay in the pickle (a map costs a page per buffer at least).
_OUT_OF_BAND_BYTES = 64 * 1024
_ALIGN = 64


@dataclass(frozen=True, slots=True)
class SharedDatasetRef:
    """What a worker process gets instead of the Dataset: the pickle's in-band bytes and where
    its out-of-band buffers lie in the shared file. `load()` gives the Dataset back."""

    path: str
    size_bytes: int
    payload: bytes
    spans: tuple[tuple[int, int], ...]  # (offset, length) of each out-of-band buffer
    per_batch: bool = False  # pickled with an EpisodeTable: per-episode arrays come per batch

    def load(self) -> Any:
        """The Dataset, its large arrays read-only views of the shared file."""
        if self.per_batch:
            raise PiLoaderError("this dataset image leaves its per-episode arrays out: use load_per_batch()")
        return self._load(None)

    def load_per_batch(self) -> tuple[Any, BatchEpisodes]:
        """The Dataset whose per-episode arrays answer for the batch installed in the returned
        `BatchEpisodes` (an image made with an `EpisodeTable`)."""
        episodes = BatchEpisodes()
        return self._load(episodes), episodes

    def _load(self, episodes: BatchEpisodes | None) -> Any:
        buffers: list[Any] = []
        if self.spans:
            view = memoryview(self._map())
            buffers = [view[offset : offset + n] for offset, n in self.spans]
        unpickler = pickle.Unpickler(io.BytesIO(self.payload), buffers=buffers)
        if episodes is not None:
            unpickler.persistent_load = episodes.proxy  # type: ignore[method-assign]
        return unpickler.load()

    def _map(self) -> mmap.mmap:
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        except OSError as err:
            raise PiLoaderError(
                f"cannot open the dataset image {self.path} the loader's main process shares ({err}); "
                "did the main process exit?"
            ) from err
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or info.st_size != self.size_bytes:
                raise PiLoaderError(
                    f"the dataset image {self.path} is {info.st_size} bytes, expected {self.size_bytes}: "
                    "not the file the main process wrote"
                )
            shared = mmap.mmap(fd, self.size_bytes, access=mmap.ACCESS_READ)
        finally:
            os.close(fd)
        return shared


class SharedDatasetImage:
    """The main process's side: the file holding a Dataset's large buffers, and the reference
    workers load it from. Close it when the workers are gone.

    Example:
        >>> image = SharedDatasetImage(ds)
        >>> ds_in_worker = image.ref.load()     # in a worker process
        >>> image.close()
    """

    def __init__(self, dataset: Any, episodes: EpisodeTable | None = None) -> None:
        buffers: list[pickle.PickleBuffer] = []

        def out_of_band(buffer: pickle.PickleBuffer) -> bool:
            if buffer.raw().nbytes < _OUT_OF_BAND_BYTES:
                return True  # in band
            buffers.append(buffer)
            return False

        out = io.BytesIO()
        pickler = pickle.Pickler(out, protocol=5, buffer_callback=out_of_band)
        if episodes is not None:
            pickler.persistent_id = episodes.persistent_id  # type: ignore[method-assign]
        pickler.dump(dataset)
        payload = out.getvalue()
        spans: list[tuple[int, int]] = []
        size = 0
        for buffer in buffers:
            size = -(-size // _ALIGN) * _ALIGN
            spans.append((size, buffer.raw().nbytes))
            size += buffer.raw().nbytes
        self._fd = -1
        self._remove: str | None = None
        path = ""
        if buffers:
            self._fd, path, self._remove = _new_file()
            try:
                os.ftruncate(self._fd, size)
                for (offset, _), buffer in zip(spans, buffers, strict=True):
                    os.pwrite(self._fd, buffer.raw(), offset)
            except BaseException:
                self.close()
                raise
        self.ref = SharedDatasetRef(
            path=path, size_bytes=size, payload=payload, spans=tuple(spans), per_batch=episodes is not None
        )

    @property
    def shared_bytes(self) -> int:
        """Bytes of the Dataset that workers map rather than copy."""
        return self.ref.size_bytes

    def close(self) -> None:
        """Give the file back (workers that mapped it keep their maps)."""
        if self._fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = -1
        if self._remove is not None:
            with contextlib.suppress(OSError):
                os.unlink(self._remove)
            self._remove = None

    def __del__(self) -> None:
        self.close()


def _new_file() -> tuple[int, str, str | None]:
    """(fd, the path other processes open it by, the path to remove on close or None)."""
    if hasattr(os, "memfd_create") and os.path.isdir(f"/proc/{os.getpid()}/fd"):
        fd = os.memfd_create("pi_loader-dataset", os.MFD_CLOEXEC)
        return fd, f"/proc/{os.getpid()}/fd/{fd}", None
    fd, path = tempfile.mkstemp(prefix="pi_loader-dataset-")
    return fd, path, path
