"""The errors of the mergeable statistics."""

from __future__ import annotations

from pi_format.errors import PiFormatError


class SketchError(PiFormatError, ValueError):
    """A quantile sketch that cannot be decoded or merged (bad bytes, other grid, other dims)."""


class MissingSketchError(PiFormatError):
    """Quantiles were asked of episodes whose rows predate the quantile sketches."""
