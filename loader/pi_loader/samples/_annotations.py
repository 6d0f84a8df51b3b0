"""Annotations delivered with samples (`SampleSpec(annotations=("instruction",))`).

Read once when a Dataset opens, in the main process: the lake's annotations of the selected
episodes as the snapshot saw them (rows written at or before `snapshot.created_at_ns`, so a
pinned or saved selection always gets the same text; the rules are pi_format.lake.annotations'),
then held as compact arrays that travel to the loader's workers. A sample's value of a kind is
that of the narrowest current span holding its step (ties: the later written), "" where none
does, with `annotation.<kind>_is_pad` True there (as `action_is_pad` marks padded actions).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pyarrow as pa
from pi_format import LakeLayout

KEY_PREFIX = "annotation."


class SpanValues:
    """Per kind, the spans of the selected episodes and their values, as arrays.

    Example:
        >>> values = SpanValues.from_rows(rows, episode_ids, ("instruction",))
        >>> values.batch(np.array([0, 0]), np.array([3, 40]))["annotation.instruction"]
        array(['pick the cube', 'place it'], dtype='<U13')
    """

    def __init__(
        self, kinds: tuple[str, ...], spans: dict[str, np.ndarray], texts: dict[str, np.ndarray]
    ) -> None:
        # spans[kind]: int64 [N, 3] (episode, start, end), sorted by episode, then narrowest
        # first, then latest written first; texts[kind]: the values, same order
        self.kinds = kinds
        self._spans = spans
        self._texts = texts

    @classmethod
    def from_rows(cls, rows: pa.Table, episode_ids: Sequence[str], kinds: tuple[str, ...]) -> SpanValues:
        """From current annotations rows (ANNOTATIONS_SCHEMA)."""
        position = {e: i for i, e in enumerate(episode_ids)}
        spans: dict[str, np.ndarray] = {}
        texts: dict[str, np.ndarray] = {}
        records = rows.to_pylist()
        for kind in kinds:
            mine = [r for r in records if r["kind"] == kind and r["episode_id"] in position]
            mine.sort(
                key=lambda r: (
                    position[r["episode_id"]],
                    r["step_end"] - r["step_start"],
                    -r["written_at_ns"],
                )
            )
            spans[kind] = np.array(
                [(position[r["episode_id"]], r["step_start"], r["step_end"]) for r in mine], np.int64
            ).reshape(-1, 3)
            texts[kind] = np.array([r["value"] for r in mine], dtype=np.str_)
        return cls(kinds, spans, texts)

    def batch(self, episodes: np.ndarray, steps: np.ndarray) -> dict[str, np.ndarray]:
        """Per kind, each sample's value ("" where none) and its `_is_pad` mask."""
        out: dict[str, np.ndarray] = {}
        for kind in self.kinds:
            spans, texts = self._spans[kind], self._texts[kind]
            values = np.full(len(episodes), "", dtype=object)
            pad = np.ones(len(episodes), bool)
            lo = np.searchsorted(spans[:, 0], episodes, side="left")
            hi = np.searchsorted(spans[:, 0], episodes, side="right")
            for i, (a, b) in enumerate(zip(lo, hi, strict=True)):
                step = steps[i]
                for j in range(a, b):  # narrowest first: the first holding span wins
                    if spans[j, 1] <= step < spans[j, 2]:
                        values[i], pad[i] = texts[j], False
                        break
            out[f"{KEY_PREFIX}{kind}"] = values.astype(np.str_)
            out[f"{KEY_PREFIX}{kind}_is_pad"] = pad
        return out


def read_span_values(
    layout: LakeLayout,
    episode_ids: Sequence[str],
    kinds: tuple[str, ...],
    *,
    as_of_ns: int,
    storage_options: Mapping[str, str] | None,
) -> SpanValues:
    """The annotations of `episode_ids` of `kinds` written at or before `as_of_ns`, current."""
    from pi_format.lake import AnnotationStore, current_annotations

    rows = AnnotationStore(layout, storage_options=storage_options).read_all(list(episode_ids))
    return SpanValues.from_rows(current_annotations(rows, as_of_ns=as_of_ns, kinds=kinds), episode_ids, kinds)
