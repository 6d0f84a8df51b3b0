"""Staging: an import reads and encodes every episode before any of them is spooled.

Sits between the readers (hdf5, lerobot) and the uploader's spool. Two phases:

1. **read**: every episode is read, checked and encoded to its wire messages into a private
   staging directory `<spool root>/.staging-<pid>-<hex>/` (one episode in memory at a time, its
   bundle on disk). Any error removes the directory and is raised as a `DatasetImportError`
   that names the file and says nothing was sent: the import committed nothing it read.
2. **commit**: the import's manifest (`import.manifest`: every episode it read, its source and
   annotations) is written into the staging directory, which is then renamed to the import's
   own spool `<spool root>/<key>/` in one atomic rename; the uploader recovers each bundle there
   as a pending entry (pi_ingest.spool). `key` is a digest of the ids of every episode the
   import read: a rerun of the same import finds its own spool and resumes it, and an unrelated
   import, whose key differs, never sends another import's episodes.

A staging directory whose process is gone (a killed import) is removed by the next import into
the same spool root, and reported by `pilake audit` meanwhile.

Example:
    >>> staged = stage_import(read_hdf5(Path("lift.hdf5")), Path("spool-import"), in_lake=set())
    >>> staged.spool_dir.name, len(staged.staged)
    ('3f2a9c0b1d7e4a21', 200)
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from pi_format.episode import Episode

from pi_jobs.importing._episodes import DatasetImportError, ImportedEpisode, SpanText
from pi_jobs.ops._spools import STAGING_PREFIX

MANIFEST_NAME = "import.manifest"  # not *.json: the spool takes those for its state files
_KEY_HEX = 16


@dataclass(slots=True)
class StagedImport:
    """What the read phase produced.

    `spool_dir`: the import's own spool (exists once anything was staged now or by an earlier
    run of the same import); `staged`: ids encoded into it by this run; `in_lake`: ids read that
    the lake already shows; `annotations`: every episode read -> its annotations.
    """

    key: str
    spool_dir: Path
    read: int = 0
    staged: list[str] = field(default_factory=list)
    in_lake: list[str] = field(default_factory=list)
    annotations: dict[str, tuple[SpanText, ...]] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    recipes: dict[str, str] = field(default_factory=dict)
    staged_bytes: int = 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def remove_stale_staging(root: Path) -> list[Path]:
    """Remove staging directories under `root` whose import process is gone; returns them."""
    removed = []
    for path in sorted(Path(root).glob(f"{STAGING_PREFIX}*")):
        pid_text = path.name[len(STAGING_PREFIX) :].split("-", 1)[0]
        if path.is_dir() and pid_text.isdigit() and not _alive(int(pid_text)):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_manifest(path: Path, key: str, staged: StagedImport) -> None:
    doc = {
        "version": 1,
        "key": key,
        "written_ns": time.time_ns(),
        "episodes": {
            eid: {
                "source": staged.sources.get(eid, ""),
                "recipe": staged.recipes.get(eid, ""),
                "annotations": [[s.kind, s.value, s.start, s.end] for s in spans],
            }
            for eid, spans in sorted(staged.annotations.items())
        },
    }
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(json.dumps(doc, sort_keys=True).encode())
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_manifest(spool_dir: Path) -> dict[str, tuple[SpanText, ...]]:
    """episode id -> annotations, from an import spool's manifest ({} when it has none)."""
    try:
        doc = json.loads((Path(spool_dir) / MANIFEST_NAME).read_text())
    except (FileNotFoundError, ValueError):
        return {}
    return {
        str(eid): tuple(SpanText(str(k), str(v), int(a), int(b)) for k, v, a, b in entry["annotations"])
        for eid, entry in doc.get("episodes", {}).items()
    }


def import_key(episode_ids: Iterable[str]) -> str:
    """The import's spool name: a digest of the ids of every episode it read (ids are themselves
    digests of the dataset's bytes), so the same import always gets the same spool."""
    digest = hashlib.sha256("\n".join(sorted(episode_ids)).encode())
    return digest.hexdigest()[:_KEY_HEX]


def episode_recipe(episode: Episode) -> str:
    """A digest of everything an import decides about an episode except the encoder's output:
    its metadata (tags carry the resize policy and source sizes), timestamps, proprio, actions,
    and each camera's spec and frame times.

    A rerun compares recipes, not bundle bytes: decoding and re-encoding the same source video
    gave other H.264 bytes about once in 25 runs (1 in 5 under load), with the same options.

    Example:
        >>> episode_recipe(episode) == episode_recipe(episode)
        True
    """
    digest = hashlib.sha256()
    digest.update(repr(episode.meta).encode())
    for array in (episode.timestamps_ns, episode.proprio, episode.action):
        digest.update(f"{array.dtype}{array.shape}".encode())
        digest.update(array.tobytes())
    for camera in episode.cameras:
        digest.update(repr(camera.spec).encode())
        digest.update(camera.frame_timestamps_ns.tobytes())
    return digest.hexdigest()


def _recipes_on_disk(spool_dir: Path) -> dict[str, str]:
    try:
        doc = json.loads((Path(spool_dir) / MANIFEST_NAME).read_text())
    except (FileNotFoundError, ValueError):
        return {}
    return {str(eid): str(entry.get("recipe", "")) for eid, entry in doc.get("episodes", {}).items()}


def stage_import(
    episodes: Iterable[ImportedEpisode],
    spool_root: Path,
    *,
    in_lake: set[str],
    say: Callable[[str], None] = lambda _: None,
) -> StagedImport:
    """Read and encode every episode (phase 1), then move them into the import's own spool in
    one rename (phase 2); see the module docstring.

    Raises:
        DatasetImportError: an episode could not be read or encoded (naming the file and item,
            saying nothing was sent); two episodes share an id; the import's spool holds an
            episode read otherwise (an earlier run with other options). Nothing is spooled.

    Example:
        >>> stage_import(read_lerobot(Path("so100")), Path("spool-import"), in_lake=set()).staged[:1]
        ['so100-5d41402abc-ep000000']
    """
    from pi_format.wire import BUNDLE_SUFFIX, encode_episode, write_bundle

    root = Path(spool_root)
    root.mkdir(parents=True, exist_ok=True)
    for path in remove_stale_staging(root):
        say(f"  import: removed {path} (an import killed while reading; nothing of it was sent)")
    staging = root / f"{STAGING_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:8]}"
    staging.mkdir()
    result = StagedImport(key="", spool_dir=root)
    last = ["the start"]  # the last episode read, for errors of a reader that names no file
    try:
        started = time.monotonic()
        for item in _checked(episodes, last):
            result.read += 1
            eid = item.episode.episode_id
            last[0] = item.source
            if eid in result.annotations:
                raise DatasetImportError(
                    f"{item.source}: episode id {eid} was read twice (also from {result.sources[eid]}); "
                    "import each file once. Nothing of this import was sent"
                )
            result.annotations[eid] = item.annotations
            result.sources[eid] = item.source
            if eid in in_lake:
                result.in_lake.append(eid)
                continue
            try:
                messages = encode_episode(item.episode)
                write_bundle(staging / f"{eid}{BUNDLE_SUFFIX}", messages)
            except (ValueError, OSError) as err:  # the wire protocol's limits, a full disk
                raise DatasetImportError(
                    f"{item.source}: cannot be encoded for the ingest path ({type(err).__name__}: "
                    f"{err}). Nothing of this import was spooled or sent"
                ) from err
            result.staged.append(eid)
            result.recipes[eid] = episode_recipe(item.episode)
            result.staged_bytes += sum(len(m) for m in messages)
            elapsed = max(time.monotonic() - started, 1e-9)
            say(
                f"  import: {result.read} read, {len(result.staged)} staged "
                f"({len(result.staged) / elapsed:.2f} episodes/s, "
                f"{result.staged_bytes / 1e6 / elapsed:.2f} MB/s) {item.source}"
            )
        result.key = import_key(result.annotations)
        result.spool_dir = root / result.key
        if result.staged:
            _commit(staging, result)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return result


def _checked(episodes: Iterable[ImportedEpisode], last: list[str]) -> Iterable[ImportedEpisode]:
    """`episodes`, with any reader error turned into a DatasetImportError that says nothing was
    sent (a reader's own errors name the file; others get the last episode read)."""
    iterator = iter(episodes)
    while True:
        try:
            item = next(iterator)
        except StopIteration:
            return
        except DatasetImportError as err:
            raise DatasetImportError(
                f"{err}. Nothing of this import was spooled or sent: fix the dataset (or the options) "
                "and rerun"
            ) from err
        except (KeyboardInterrupt, SystemExit):
            raise
        except Exception as err:
            raise DatasetImportError(
                f"reading the episode after {last[0]} failed: {type(err).__name__}: {err}. Nothing of "
                "this import was spooled or sent: check that file and rerun"
            ) from err
        yield item


def _commit(staging: Path, result: StagedImport) -> None:
    """Phase 2: the staged bundles become the import's spool (atomically when it is new)."""
    from pi_format.wire import BUNDLE_SUFFIX, read_bundle
    from pi_ingest import Spool
    from pi_ingest.errors import SpoolError

    target = result.spool_dir
    if not target.exists():
        _write_manifest(staging / MANIFEST_NAME, result.key, result)
        os.rename(staging, target)  # the commit point: before it nothing is spooled, after it all
        _fsync_dir(target.parent)
        return
    # a rerun of this import: its spool may hold some of these episodes still; check every one
    # before adding any, so an error leaves that spool as it was
    spool = Spool(target)
    earlier = _recipes_on_disk(target)
    add: list[str] = []
    for eid in result.staged:
        if spool.get(eid) is None:
            add.append(eid)
            continue
        if earlier.get(eid):  # what the earlier run decided, not its encoder's exact bytes
            same = earlier[eid] == result.recipes[eid]
        else:  # a spool from before recipes were recorded
            same = spool.messages(eid) == read_bundle(staging / f"{eid}{BUNDLE_SUFFIX}")
        if not same:
            raise DatasetImportError(
                f"episode {eid} is still pending in {target} from an earlier run of this import with "
                "other content (other --resize, --fps or robot options?): rerun with that run's options "
                f"to finish it, or remove {target} to discard it (copies already sent may still commit). "
                "Nothing of this run was spooled or sent"
            )
    _write_manifest(target / MANIFEST_NAME, result.key, result)
    for eid in add:
        try:
            spool.add(eid, read_bundle(staging / f"{eid}{BUNDLE_SUFFIX}"))
        except SpoolError as err:  # pragma: no cover - checked above
            raise DatasetImportError(f"{eid}: {err}") from err
