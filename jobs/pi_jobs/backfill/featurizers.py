"""Named, versioned featurizers a backfill can re-featurize the lake with (`pilake backfill
--featurizer NAME`).

Each name maps to one `FeaturizeConfig` (the stream job's featurizer, pi_jobs.stream.featurize,
with other settings) and a version. The attempts a backfill commits carry "<name>@<version>"
in the episodes table's `featurizer` column, so a re-run knows which episodes are already done
and readers can tell attempts apart. Change a featurizer's config only together with its
version: an existing "<name>@<version>" must keep meaning the same bytes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pi_jobs.stream.featurize import FeaturizeConfig

_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,39}$")


@dataclass(frozen=True, slots=True)
class Featurizer:
    """One named, versioned featurizer.

    Example:
        >>> FEATURIZERS["res96"].tag
        'res96@1'
    """

    name: str
    version: int
    config: FeaturizeConfig
    description: str

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ValueError(
                f"featurizer name must match {_NAME.pattern} (it is stored as '<name>@<version>'), "
                f"got {self.name!r}"
            )
        if isinstance(self.version, bool) or not isinstance(self.version, int) or self.version < 1:
            raise ValueError(f"featurizer version must be an int >= 1, got {self.version!r}")

    @property
    def tag(self) -> str:
        """The episodes rows' `featurizer` value: "<name>@<version>"."""
        return f"{self.name}@{self.version}"


FEATURIZERS: dict[str, Featurizer] = {
    f.name: f
    for f in (
        # a smaller training resolution: 96x96 decodes ~5x faster than 224x224 for small policies
        Featurizer("res96", 1, FeaturizeConfig(video_width=96, video_height=96), "96x96 video"),
        # longer video rows: half the rows (and per-row overhead) for sequential readers
        Featurizer("chunk20", 1, FeaturizeConfig(chunk_frames=20), "20-frame video chunks"),
        # one closed GOP per 10-frame row: 2-3x fewer video bytes than intra-only (ARCHITECTURE.md)
        Featurizer("gop10", 1, FeaturizeConfig(keyframe_interval=10), "an IDR every 10 frames"),
    )
}


def get_featurizer(name: str) -> Featurizer:
    """The registered featurizer `name`.

    Raises:
        ValueError: no featurizer has that name (the message lists the names there are).

    Example:
        >>> get_featurizer("gop10").config.keyframe_interval
        10
    """
    found = FEATURIZERS.get(name)
    if found is None:
        raise ValueError(
            f"unknown featurizer {name!r}; registered: {sorted(FEATURIZERS)} "
            "(pi_jobs.backfill.featurizers.FEATURIZERS)"
        )
    return found
