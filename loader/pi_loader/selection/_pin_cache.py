"""Dataset pins by name, remembered by this host, so a pin opens while the store is down.

`Dataset(lake, snapshot="pick-v3")` looks the pin up in the lake's `pins` table. On an s3://
lake the store is probed first (a listing of the table's `_delta_log/`, under the loader's retry
deadline): deltalake's own retries on a down store last minutes, and a pins table that does not
answer is not "no such pin". Every pin found is written here (`<host index dir>/pins/<name>.json`);
when the store stays unreachable, the pin comes from here (with a warning), or the
StoreUnreachableError says this host never opened it.

Example:
    >>> lookup_pin(layout, "pick-v3", storage, Path(index_dir) / "pins", find=find_in_lake)
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from pi_format import LakeLayout

from pi_loader.reading._retry import StoreUnreachableError
from pi_loader.reading._storage import S3Storage, Storage
from pi_loader.selection._snapshot import Snapshot

__all__ = ["lookup_pin"]

_log = logging.getLogger("pi_loader")


def _probe(layout: LakeLayout, storage: Storage) -> None:
    """Raise StoreUnreachableError when an s3:// lake's store does not answer a listing."""
    if isinstance(storage, S3Storage):
        log = f"{layout.pins.rstrip('/')}/_delta_log"
        storage.list_files(log.split("://", 1)[1], what=f"listing {log} (the dataset pins)")


def _save(directory: Path, name: str, snapshot: Snapshot) -> None:
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-")
        try:
            with os.fdopen(fd, "w") as out:
                out.write(snapshot.to_json())
            os.rename(tmp, directory / f"{name}.json")
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
    except OSError:
        pass  # a cache: the open has its pin


def lookup_pin(
    layout: LakeLayout,
    name: str,
    storage: Storage | None,
    directory: Path | None,
    *,
    find: Callable[[], Snapshot | None],
) -> Snapshot | None:
    """The pin `name` as a Snapshot (`find()` reads the lake), or None when the lake has none.

    Raises:
        StoreUnreachableError: the store is down and this host has no copy of the pin.
    """
    if storage is not None:
        try:
            _probe(layout, storage)
        except StoreUnreachableError as err:
            kept = None if directory is None else directory / f"{name}.json"
            if kept is None or not kept.exists():
                raise StoreUnreachableError(
                    f"cannot look up the dataset pin {name!r} of {layout.root}: {err}. This host never "
                    "opened it (a pin opened once with the store up opens from the cache while it is down)"
                ) from None
            _log.warning(
                "the object store is unreachable; pin %r is read from this host's copy %s", name, kept
            )
            return Snapshot.load(kept)
    found = find()
    if found is not None and directory is not None:
        _save(directory, name, found)
    return found
