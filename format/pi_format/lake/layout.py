"""Where each Delta table of a lake lives, given the lake's root (a local dir or s3://)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from pi_format.lake.schemas import TABLE_SCHEMAS


@dataclass(frozen=True, slots=True)
class LakeLayout:
    """Paths of the lake's tables under `root`.

    Example:
        >>> LakeLayout("/data/lake").table("steps")
        '/data/lake/steps'
    """

    root: str

    def __post_init__(self) -> None:
        if not self.root:
            raise ValueError("lake root must be a non-empty path or URI, got ''")
        if "://" not in self.root:
            object.__setattr__(self, "root", os.path.abspath(self.root))

    def table(self, name: str) -> str:
        if name not in TABLE_SCHEMAS:
            raise KeyError(f"unknown table {name!r}; tables are {sorted(TABLE_SCHEMAS)}")
        return f"{self.root.rstrip('/')}/{name}"

    @property
    def raw(self) -> str:
        return self.table("raw")

    @property
    def episodes(self) -> str:
        return self.table("episodes")

    @property
    def steps(self) -> str:
        return self.table("steps")

    @property
    def video(self) -> str:
        return self.table("video")

    @property
    def quarantine(self) -> str:
        return self.table("quarantine")

    @property
    def quarantine_releases(self) -> str:
        return self.table("quarantine_releases")

    @property
    def deletions(self) -> str:
        return self.table("deletions")

    @property
    def pins(self) -> str:
        return self.table("pins")

    @property
    def annotations(self) -> str:
        return self.table("annotations")

    @property
    def is_local(self) -> bool:
        return "://" not in self.root or self.root.startswith("file://")
