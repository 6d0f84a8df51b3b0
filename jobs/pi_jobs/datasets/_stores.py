"""The two ends of a copy: a lake root on a local disk or an object store, reached through the
object-store library the rest of the project uses (`pyarrow.fs`: the lake writer's files, the
loader's `S3Storage`). S3 settings come from the environment (AWS_ENDPOINT_URL, AWS_REGION,
AWS_ALLOW_HTTP, credentials), as for deltalake and pi_loader; secrets never reach a message.

Large objects move in parts: ranged reads of `part_bytes` each, fetched in parallel, and
`pyarrow`'s S3 output stream uploads in multipart pieces in the background. A local file is
written under a temporary name and renamed, an S3 object appears when its upload completes: a
killed copy never leaves a half-written file under a lake file's name.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

_S3_SCHEMES = ("s3", "s3a")


@dataclass(frozen=True)
class LakeStore:
    """Files under one lake root, by path relative to it (`steps/part-....parquet`).

    Example:
        >>> store = LakeStore.open("s3://bucket/lake")
        >>> store.size("steps/part-fixture-3f6c.parquet")
        1048576
    """

    root: str
    fs: Any
    base: str  # the root as the filesystem names it (bucket/key or an absolute path)
    remote: bool
    secrets: tuple[str, ...] = ()

    @classmethod
    def open(cls, root: str) -> LakeStore:
        """The store of lake `root` (a local path, file://, or s3://bucket/prefix).

        Raises:
            ValueError: another scheme, or an s3:// URI without a bucket.
        """
        parts = urlsplit(root)
        if "://" not in root or parts.scheme == "file":
            import pyarrow.fs as pafs

            path = os.path.abspath(parts.path if parts.scheme == "file" else root)
            return cls(root=path, fs=pafs.LocalFileSystem(), base=path, remote=False)
        if parts.scheme not in _S3_SCHEMES or not parts.netloc:
            raise ValueError(
                f"a lake is a local path or s3://bucket/prefix, got {root!r}; other object stores are "
                "not supported by `pilake dataset copy`"
            )
        from pi_loader.reading._storage import S3Options

        options = S3Options.from_storage_options(
            {k: v for k, v in os.environ.items() if k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
        )
        base = (parts.netloc + parts.path).rstrip("/")
        return cls(
            root=root.rstrip("/"), fs=options.filesystem(), base=base, remote=True, secrets=options.secrets()
        )

    def path(self, relative: str) -> str:
        return f"{self.base}/{relative}"

    def uri(self, relative: str) -> str:
        return f"{self.root}/{relative}"

    def scrub(self, message: str) -> str:
        for secret in self.secrets:
            message = message.replace(secret, "***")
        return message

    def size(self, relative: str) -> int | None:
        """The file's size, or None when there is none."""
        import pyarrow.fs as pafs

        info = self.fs.get_file_info(self.path(relative))
        return int(info.size) if info.type == pafs.FileType.File else None

    def holds_nothing(self, *, but: str) -> bool:
        """True when nothing is under the root but the entry `but` (one listing); False when
        anything else is, or when the root cannot be listed (not a directory, a refusal)."""
        import pyarrow.fs as pafs

        selector = pafs.FileSelector(self.base, allow_not_found=True, recursive=False)
        try:
            entries = self.fs.get_file_info(selector)
        except OSError:
            return False
        return all(entry.base_name == but for entry in entries)

    def listing(self, directories: list[str]) -> dict[str, int]:
        """Relative path -> size of every file directly in `directories` (relative to the root)."""
        import pyarrow.fs as pafs

        out: dict[str, int] = {}
        for directory in directories:
            selector = pafs.FileSelector(self.path(directory), allow_not_found=True, recursive=False)
            for info in self.fs.get_file_info(selector):
                if info.type == pafs.FileType.File:
                    out[f"{directory}/{info.base_name}"] = int(info.size)
        return out

    def read(self, relative: str, *, part_bytes: int, parts: ThreadPoolExecutor | None) -> bytes | memoryview:
        """The whole file; a file over `part_bytes` in ranged reads run on `parts`. A file read
        in one piece is a view of the library's buffer (not copied again into bytes)."""
        path = self.path(relative)
        with self.fs.open_input_file(path) as handle:
            size = int(handle.size())
            if size <= part_bytes or parts is None:
                return memoryview(handle.read())
        ranges = [(start, min(part_bytes, size - start)) for start in range(0, size, part_bytes)]

        def fetch(span: tuple[int, int]) -> bytes:
            with self.fs.open_input_file(path) as own:  # one handle per part: reads run at once
                return bytes(own.read_at(span[1], span[0]))

        return b"".join(parts.map(fetch, ranges))

    def write(
        self, relative: str, data: bytes | memoryview, *, check: Callable[[], str] | None = None
    ) -> str:
        """Write `data` as the file: locally under a temporary name, then renamed into place; to
        S3 through a (multipart) upload that completes on close.

        `check` (the source-side verdict on `data`, computed while the bytes go out) is awaited
        before a local file takes its name (a non-empty verdict removes the temporary file) and
        after an S3 upload completed (a non-empty verdict deletes the object: pyarrow's stream
        cannot abort an upload, and an object under 10 MiB only leaves on close; the object is
        in no Delta log, so no reader sees it, and a resumed copy checks whatever it finds in
        place before keeping it). Returns the verdict ('' when written).
        """
        path = self.path(relative)
        if self.remote:
            with self.fs.open_output_stream(path) as out:  # parts upload in the background
                out.write(data)
            problem = check() if check is not None else ""
            if problem:
                self.fs.delete_file(path)
            return problem
        os.makedirs(os.path.dirname(path), exist_ok=True)
        temporary = f"{os.path.dirname(path)}/.copying-{uuid.uuid4().hex}"
        try:
            with open(temporary, "wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            problem = check() if check is not None else ""
            if not problem:
                os.replace(temporary, path)
        finally:
            if os.path.exists(temporary):
                os.remove(temporary)
        return problem

    def read_text(self, relative: str) -> str | None:
        """A small text file, or None when there is none."""
        if self.size(relative) is None:
            return None
        with self.fs.open_input_stream(self.path(relative)) as handle:
            return bytes(handle.read()).decode("utf-8")

    def write_text(self, relative: str, text: str) -> None:
        self.write(relative, text.encode("utf-8"))


def contains(outer: str, inner: str) -> bool:
    """Whether lake root `inner` lies inside (or is) lake root `outer`.

    Example:
        >>> contains("/data/lake", "/data/lake/copy"), contains("s3://b/lake", "s3://b/lake2")
        (True, False)
    """

    def norm(root: str) -> str:
        parts = urlsplit(root)
        if "://" not in root or parts.scheme == "file":
            local = parts.path if parts.scheme == "file" else root
            return os.path.realpath(os.path.abspath(local)).rstrip("/") + "/"
        scheme = "s3" if parts.scheme in _S3_SCHEMES else parts.scheme
        return f"{scheme}://{parts.netloc}{parts.path}".rstrip("/") + "/"

    return norm(inner).startswith(norm(outer))
