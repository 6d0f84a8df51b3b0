"""Bundle files on the robot: which files a path names, and whether one is a whole, valid episode.

Before the spool (`pi_ingest.spool`): `pilake upload PATH...` and `Uploader.submit_bundle`
check every bundle here, so a damaged file is refused on the robot, not quarantined in the lake.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pi_format.errors import ProtocolError
from pi_format.wire import BUNDLE_SUFFIX, EpisodeAssembler, decode_chunk, read_bundle

from pi_ingest.errors import BundleError


def read_checked_bundle(path: Path) -> tuple[str, list[bytes]]:
    """Read a bundle file and check that it holds one whole, valid episode.

    Args:
        path: the bundle file (`*.piep`).

    Returns:
        (the episode id, its messages exactly as stored in the file).

    Raises:
        BundleError: the file is unreadable, mixes episodes, or fails the manifest checks.

    Example:
        >>> read_checked_bundle(Path("bundles/sim0-r000-e00000.piep"))[0]
        'sim0-r000-e00000'
    """
    path = Path(path)
    try:
        messages = read_bundle(path)
    except OSError as err:
        raise BundleError(f"cannot read bundle {path}: {err}") from err
    except ProtocolError as err:
        raise BundleError(f"{path} is not a valid bundle: {err}") from err
    if not messages:
        raise BundleError(f"bundle {path} holds no messages")
    assembler: EpisodeAssembler | None = None
    for i, message in enumerate(messages):
        try:
            chunk = decode_chunk(message)
        except ProtocolError as err:
            raise BundleError(f"message {i} of bundle {path} does not decode: {err}") from err
        if assembler is None:
            assembler = EpisodeAssembler(chunk.episode_id)
        if chunk.episode_id != assembler.episode_id:
            raise BundleError(
                f"bundle {path} mixes episodes: message {i} is {chunk.episode_id!r}, "
                f"message 0 is {assembler.episode_id!r}; a bundle holds one episode"
            )
        try:
            assembler.add(chunk)
        except ProtocolError as err:
            raise BundleError(f"message {i} of bundle {path}: {err}") from err
    if assembler is None or not assembler.is_complete:
        have = 0 if assembler is None else len(assembler.chunks)
        raise BundleError(
            f"bundle {path} is incomplete: {have} of "
            f"{None if assembler is None else assembler.chunk_count} chunks"
        )
    try:
        assembler.assemble()  # manifest, checksums and metadata: refuse locally, not in the lake
    except ProtocolError as err:
        raise BundleError(f"bundle {path} fails the episode checks: {err}") from err
    return assembler.episode_id, messages


def bundle_files(paths: Sequence[Path]) -> list[Path]:
    """The bundle files `paths` name: files as given, directories as their `*.piep` files, sorted.

    Raises:
        BundleError: a path is neither a file nor a directory (e.g. missing), or a directory
            holds no bundles.

    Example:
        >>> bundle_files([Path("bundles")])
        [PosixPath('bundles/sim0-r000-e00000.piep'), PosixPath('bundles/sim0-r000-e00001.piep')]
    """
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(p.glob(f"*{BUNDLE_SUFFIX}"))
            if not found:
                raise BundleError(f"directory {p} holds no *{BUNDLE_SUFFIX} bundles")
            files.extend(found)
        elif p.is_file():
            files.append(p)
        else:
            raise BundleError(f"{p} is neither a bundle file nor a directory of bundles")
    return files
