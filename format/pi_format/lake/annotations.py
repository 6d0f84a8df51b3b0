"""Episode annotations: language instructions, subtasks, quality scores and tags written after the
fact, without rewriting a step or a video chunk (SPEC.md §7.12, `pilake annotate`).

The `annotations` table is append-only, one row per (episode, step span, kind, source, version).
The rules, written once here for every writer (the importers, `pilake annotate import`) and every
reader (the catalog, pi_loader, `pilake annotate list`):

* **Identity.** `annotation_id` is the sha256 of every column but `written_at_ns`: importing the
  same file twice adds nothing (`AnnotationStore.append` skips ids the table holds; a row that a
  concurrent import added twice is read once).
* **Current value.** Of the rows with one (episode_id, step_start, step_end, kind, source), the
  highest `version` is current (ties: the later `written_at_ns`); older versions stay for pins.
* **They follow the episode.** `attempt_id` records the attempt a row was written against; the
  row applies to whichever attempt of the episode is visible, so a backfill's new attempt (the
  same steps, re-featurized) inherits its episode's annotations.
* **Visibility.** A deleted episode's annotations are hidden with it (the `deletions` table) and
  GC removes its rows when it removes the episode's bytes (`drop_episode_annotations`).
* **Pins.** A dataset pin sees the rows written at or before its creation
  (`written_at_ns <= pin.created_at_ns`, `as_of_ns`), so a later import never changes what a
  pinned run reads; the pin records the table's version it saw in `table_versions`.

Example:
    >>> store = AnnotationStore(LakeLayout("/data/lake"))
    >>> store.append([Annotation("r1-000001", "5c0f", 0, 120, "instruction", "pick the cube",
    ...                          source="labeler-a", version=1)])
    1
    >>> store.current(["r1-000001"]).column("value").to_pylist()
    ['pick the cube']
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pi_format.lake._commit import commit_actions
from pi_format.lake._files import table_filesystem, write_file
from pi_format.lake.layout import LakeLayout
from pi_format.lake.schemas import ANNOTATIONS_SCHEMA
from pi_format.lake.tables import ensure_lake_tables, row_group_sizes

# The kinds an annotation may have: what each means for a reader.
ANNOTATION_KINDS = ("instruction", "quality_score", "subtask", "tag")
# The columns that identify a current value (everything but value, version and provenance).
SLOT_COLUMNS = ("episode_id", "step_start", "step_end", "kind", "source")
_ID_COLUMNS = ("episode_id", "attempt_id", "step_start", "step_end", "kind", "value", "source", "version")


@dataclass(frozen=True, slots=True)
class Annotation:
    """One annotation of the steps [step_start, step_end) of an episode.

    Args:
        episode_id: the episode.
        attempt_id: the attempt it was written against (the visible one when imported).
        step_start: the span's first step (0 <= step_start < step_end).
        step_end: the step after the span's last (the span is half-open).
        kind: one of ANNOTATION_KINDS; a quality_score's value is a finite number.
        value: the text (an instruction, a subtask name, a tag, a score as text).
        source: who or what wrote it ("labeler-a", "lerobot:tasks").
        version: the source's version of this annotation (higher supersedes lower).

    Raises:
        ValueError: a field breaks a rule above (the message names it, the value and the fix).

    Example:
        >>> Annotation("r1-000001", "5c0f", 0, 50, "subtask", "reach", source="vlm-v2", version=3)
    """

    episode_id: str
    attempt_id: str
    step_start: int
    step_end: int
    kind: str
    value: str
    source: str
    version: int = 0

    def __post_init__(self) -> None:
        for name in ("episode_id", "attempt_id", "source"):
            got = getattr(self, name)
            if not isinstance(got, str) or not got:
                raise ValueError(f"annotation {name} must be a non-empty string, got {got!r}")
        if self.kind not in ANNOTATION_KINDS:
            raise ValueError(f"annotation kind must be one of {list(ANNOTATION_KINDS)}, got {self.kind!r}")
        if not isinstance(self.value, str):
            raise ValueError(f"annotation value must be a string, got {self.value!r}; quote numbers")
        for name in ("step_start", "step_end", "version"):
            got = getattr(self, name)
            if isinstance(got, bool) or not isinstance(got, int) or got < 0:
                raise ValueError(f"annotation {name} must be an integer >= 0, got {got!r}")
        if self.step_end <= self.step_start:
            raise ValueError(
                f"annotation span [{self.step_start}, {self.step_end}) of {self.episode_id} is empty; "
                "step_end is exclusive and must be > step_start"
            )
        if self.kind == "quality_score":
            try:
                score = float(self.value)
            except ValueError:
                score = math.nan
            if not math.isfinite(score):
                raise ValueError(f"a quality_score value must be a finite number, got {self.value!r}")

    @property
    def annotation_id(self) -> str:
        fields = [getattr(self, c) for c in _ID_COLUMNS]
        return hashlib.sha256(json.dumps(fields, separators=(",", ":")).encode()).hexdigest()


def annotation_rows(annotations: Sequence[Annotation], written_at_ns: int | None = None) -> pa.Table:
    """`annotations` as rows of ANNOTATIONS_SCHEMA, stamped `written_at_ns` (now when None)."""
    now = time.time_ns() if written_at_ns is None else written_at_ns
    columns: dict[str, list[Any]] = {name: [] for name in ANNOTATIONS_SCHEMA.names}
    for a in annotations:
        columns["annotation_id"].append(a.annotation_id)
        for name in _ID_COLUMNS:
            columns[name].append(getattr(a, name))
        columns["written_at_ns"].append(now)
    return pa.table(columns, schema=ANNOTATIONS_SCHEMA)


def current_annotations(
    rows: pa.Table,
    visible_ids: pa.Array | Sequence[str] | None = None,
    *,
    as_of_ns: int | None = None,
    kinds: Sequence[str] | None = None,
) -> pa.Table:
    """The current annotations among `rows` (ANNOTATIONS_SCHEMA): one row per annotation id, those
    of episodes in `visible_ids` only (all when None), written at or before `as_of_ns` (a pin's
    creation time; all when None), of `kinds` (all when None), then per (episode, span, kind,
    source) the highest version. Sorted by (episode_id, step_start, kind, source). Pure Arrow.

    Example:
        >>> current_annotations(rows, ["r1-000001"]).num_rows
        2
    """
    if rows.num_rows == 0:
        return rows.select(ANNOTATIONS_SCHEMA.names).cast(ANNOTATIONS_SCHEMA)
    if as_of_ns is not None:
        rows = rows.filter(pc.less_equal(rows.column("written_at_ns"), as_of_ns))
    if kinds is not None:
        rows = rows.filter(pc.is_in(rows.column("kind"), value_set=pa.array(list(kinds), pa.string())))
    if visible_ids is not None:
        ids = visible_ids if isinstance(visible_ids, pa.Array) else pa.array(list(visible_ids), pa.string())
        rows = rows.filter(pc.is_in(rows.column("episode_id"), value_set=ids))
    if rows.num_rows == 0:
        return rows.select(ANNOTATIONS_SCHEMA.names).cast(ANNOTATIONS_SCHEMA)
    order = pc.sort_indices(
        rows,
        sort_keys=[
            *((c, "ascending") for c in SLOT_COLUMNS),
            ("version", "descending"),
            ("written_at_ns", "descending"),
            ("annotation_id", "ascending"),
        ],
    )
    rows = rows.take(order)
    slot = _slot_keys(rows)
    first = np.concatenate([[True], slot[1:] != slot[:-1]])
    return rows.filter(pa.array(first)).select(ANNOTATIONS_SCHEMA.names).cast(ANNOTATIONS_SCHEMA)


def _slot_keys(rows: pa.Table) -> np.ndarray:
    parts = [pc.cast(rows.column(c), pa.string()) for c in SLOT_COLUMNS]
    joined = pc.binary_join_element_wise(*parts, "\x1f")
    return np.asarray(joined.to_numpy(zero_copy_only=False))


def value_at(annotations: pa.Table, episode_id: str, step: int, kind: str) -> str | None:
    """The value of `kind` that step `step` of `episode_id` carries among `annotations` (current
    rows, `current_annotations`): of the rows whose span holds the step, the narrowest, then the
    latest written; None when none does.

    Example:
        >>> value_at(current, "r1-000001", 12, "instruction")
        'pick the cube'
    """
    best: tuple[int, int] | None = None
    out: str | None = None
    for row in annotations.to_pylist():
        if row["episode_id"] != episode_id or row["kind"] != kind:
            continue
        if not row["step_start"] <= step < row["step_end"]:
            continue
        rank = (row["step_end"] - row["step_start"], -row["written_at_ns"])
        if best is None or rank < best:
            best, out = rank, row["value"]
    return out


class AnnotationStore:
    """The lake's `annotations` table.

    Example:
        >>> AnnotationStore(LakeLayout("/data/lake")).current(["r1-000001"]).num_rows
        3
    """

    def __init__(self, layout: LakeLayout, *, storage_options: Mapping[str, str] | None = None) -> None:
        self.layout = layout
        self.storage_options = dict(storage_options) if storage_options else None

    def _table(self) -> Any:
        """The Delta table, or None for a lake that has no annotations table yet."""
        from deltalake import DeltaTable

        try:
            return DeltaTable(self.layout.annotations, storage_options=self.storage_options)
        except Exception:  # deltalake's TableNotFoundError: a lake made before annotations
            return None

    def version(self) -> int | None:
        """The table's Delta version (None: no table yet): what a pin records."""
        table = self._table()
        return None if table is None else int(table.version())

    def read_all(self, episode_ids: Sequence[str] | None = None) -> pa.Table:
        """Every row (all versions, deleted episodes included) of `episode_ids` (all when None),
        one per annotation id."""
        table = self._table()
        if table is None:
            return ANNOTATIONS_SCHEMA.empty_table()
        rows = table.to_pyarrow_table()
        if episode_ids is not None:
            rows = rows.filter(
                pc.is_in(rows.column("episode_id"), value_set=pa.array(list(episode_ids), pa.string()))
            )
        if rows.num_rows == 0:
            return ANNOTATIONS_SCHEMA.empty_table()
        _, first = np.unique(rows.column("annotation_id").to_numpy(zero_copy_only=False), return_index=True)
        return rows.take(pa.array(np.sort(first))).select(ANNOTATIONS_SCHEMA.names).cast(ANNOTATIONS_SCHEMA)

    def current(
        self,
        episode_ids: Sequence[str] | None = None,
        *,
        as_of_ns: int | None = None,
        kinds: Sequence[str] | None = None,
    ) -> pa.Table:
        """The current annotations of the visible episodes among `episode_ids` (all when None):
        `current_annotations` over the table with the lake's visibility (deleted episodes out)."""
        from pi_format.lake.visibility import read_committed

        rows = self.read_all(episode_ids)
        if rows.num_rows == 0:
            return rows
        committed = read_committed(self.layout, ["episode_id"], storage_options=self.storage_options)
        visible = committed.column("episode_id").combine_chunks()
        return current_annotations(rows, visible, as_of_ns=as_of_ns, kinds=kinds)

    def append(self, annotations: Iterable[Annotation], *, writer_id: str = "annotate") -> int:
        """Add `annotations` (those whose id the table lacks) in one Delta commit; returns how
        many rows were added (0 when all were there: a rerun of an import)."""
        wanted = list({a.annotation_id: a for a in annotations}.values())
        if not wanted:
            return 0
        tables = ensure_lake_tables(self.layout)
        have = set()
        existing = tables["annotations"].to_pyarrow_table(columns=["annotation_id"])
        if existing.num_rows:
            have = set(existing.column("annotation_id").to_pylist())
        fresh = [a for a in wanted if a.annotation_id not in have]
        if not fresh:
            return 0
        rows = annotation_rows(fresh)
        written = write_file(
            self.layout.annotations,
            rows,
            row_group_sizes("annotations", rows.num_rows),
            writer_id=writer_id,
            compression="zstd",
        )
        commit_actions(tables["annotations"], "annotations", adds=[written], operation="annotate")
        return rows.num_rows


def drop_episode_annotations(
    layout: LakeLayout, episode_ids: Iterable[str], *, dry_run: bool = False, writer_id: str = "gc"
) -> int:
    """Remove every annotations row of `episode_ids` (GC: the episodes' bytes go, no pin holds
    them) by rewriting the files that hold any; returns the rows removed (or that would be)."""
    import pyarrow.parquet as pq

    ids = sorted(set(episode_ids))
    table = AnnotationStore(layout)._table()
    if not ids or table is None:
        return 0
    wanted = pa.array(ids, pa.string())
    actions = pa.table(table.get_add_actions(flatten=True))
    filesystem, base = table_filesystem(layout.annotations)
    dropped = 0
    adds, removes = [], []
    for path, size in zip(
        actions.column("path").to_pylist(), actions.column("size_bytes").to_pylist(), strict=True
    ):
        rows = pq.read_table(f"{base}/{path}", filesystem=filesystem)
        drop = pc.is_in(rows.column("episode_id"), value_set=wanted)
        n_drop = int(pc.sum(drop).as_py() or 0)
        if not n_drop:
            continue
        dropped += n_drop
        removes.append((path, int(size)))
        rest = rows.filter(pc.invert(drop))
        if rest.num_rows and not dry_run:
            rest = rest.select(ANNOTATIONS_SCHEMA.names).cast(ANNOTATIONS_SCHEMA)
            adds.append(
                write_file(
                    layout.annotations,
                    rest,
                    row_group_sizes("annotations", rest.num_rows),
                    writer_id=writer_id,
                    compression="zstd",
                )
            )
    if removes and not dry_run:
        commit_actions(table, "annotations", adds=adds, removes=removes, operation="gc")
    return dropped
