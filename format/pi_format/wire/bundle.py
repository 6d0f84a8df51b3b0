"""Episode bundle files: the wire chunks of one episode, length-prefixed, in one file.

The simulator writes bundles, `pilake upload PATH` reads them, and the uploader's spool keeps
them until the lake confirms the episode. A bundle holds exactly what goes on the wire, so
the bytes re-sent after a failure are the bytes first sent.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Sequence
from pathlib import Path

from pi_format.errors import ProtocolError
from pi_format.errors import QuarantineReason as R

BUNDLE_MAGIC = b"PIBUNDL1"
_LEN = struct.Struct(">I")
BUNDLE_SUFFIX = ".piep"


def write_bundle(path: str | os.PathLike[str], messages: Sequence[bytes]) -> Path:
    """Atomically write `messages` to `path` (write to a temp file, fsync, rename).

    Example:
        >>> write_bundle("spool/r1-000001.piep", encode_episode(episode))
    """
    target = Path(path)
    tmp = target.with_name(target.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(BUNDLE_MAGIC)
        f.write(_LEN.pack(len(messages)))
        for m in messages:
            f.write(_LEN.pack(len(m)))
            f.write(m)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, target)
    dir_fd = os.open(target.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return target


def read_bundle(path: str | os.PathLike[str]) -> list[bytes]:
    """Read the messages of a bundle file.

    Raises:
        ProtocolError: reason bad_magic or truncated when the file is not a whole bundle.
    """
    data = Path(path).read_bytes()
    if data[: len(BUNDLE_MAGIC)] != BUNDLE_MAGIC:
        raise ProtocolError(R.BAD_MAGIC, f"{path} is not a pi-lake episode bundle")
    pos = len(BUNDLE_MAGIC)
    try:
        (count,) = _LEN.unpack_from(data, pos)
        pos += _LEN.size
        messages = []
        for _ in range(count):
            (n,) = _LEN.unpack_from(data, pos)
            pos += _LEN.size
            if pos + n > len(data):
                raise struct.error("message runs past the end of the file")
            messages.append(data[pos : pos + n])
            pos += n
    except struct.error as err:
        raise ProtocolError(R.TRUNCATED, f"bundle {path} is truncated: {err}") from err
    return messages
