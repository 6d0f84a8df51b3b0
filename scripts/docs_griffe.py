"""A griffe extension for the API reference (mkdocs.yml, mkdocstrings' `extensions`): the house
style heads a docstring's doctest with `Example:`, which griffe's Google parser reads as an
admonition of prose (so `['r1']` in an output line became a broken cross-reference); it is read
as the `Examples:` section it is, and its `>>>` lines render as code.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_EXAMPLE = re.compile(r"^Example:[ \t]*$", re.M)


class ExampleSections(griffe.Extension):
    """Rename each top-level `Example:` section of a docstring to `Examples:` before it is parsed."""

    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = _EXAMPLE.sub("Examples:", obj.docstring.value)
