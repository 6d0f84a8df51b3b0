"""`pilake annotate import | list`: episode annotations written after the fact (SPEC.md §7.12).

An import reads a JSON Lines file, one annotation per line:

    {"episode_id": "r1-000001", "kind": "instruction", "value": "pick up the cube",
     "source": "labeler-a", "version": 1, "step_start": 0, "step_end": 120}

`step_start`/`step_end` (half-open) default to the whole episode, `attempt_id` to the visible
attempt, `source` to the import's `--source`, `version` to 0. Every line is checked against the
lake's visible episodes before anything is written (an unknown or deleted episode, a span past
the episode's last step, a bad kind or score): one bad line writes nothing, and the error names
each bad line, its value and what to do. The rows go into the lake's `annotations` table in one
commit (`pi_format.lake.AnnotationStore`: a rerun adds nothing) and then into the catalog's
`annotations` table, so SQL selects episodes by them at once.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
from pi_format import LakeLayout
from pi_format.lake import Annotation, AnnotationStore, read_committed

from pi_jobs.errors import PiJobsError

_FIELDS = {"episode_id", "attempt_id", "kind", "value", "source", "version", "step_start", "step_end"}
_MAX_ERRORS_SHOWN = 10


class AnnotationImportError(PiJobsError):
    """An annotations file has lines that cannot be imported; nothing was written."""


@dataclass(frozen=True, slots=True)
class AnnotationImport:
    """What `import_annotations` did."""

    lines: int
    added: int  # rows new to the lake (a rerun adds 0)
    episodes: int
    catalog_recorded: int

    def lines_out(self) -> list[str]:
        return [
            f"annotations: {self.lines} lines for {self.episodes} episodes; "
            f"{self.added} new rows in the lake ({self.lines - self.added} already there)",
            f"catalog: {self.catalog_recorded} rows synced to the table `annotations` (idempotent)",
        ]


def parse_annotations(
    records: Iterable[Mapping[str, Any]],
    visible: Mapping[str, tuple[str, int]],
    *,
    default_source: str | None,
    committed_attempts: Mapping[str, set[str]] | None = None,
    origin: str = "annotations",
) -> list[Annotation]:
    """Annotations from `records` (one dict per line), checked against `visible` (episode_id ->
    (visible attempt_id, step_count)); AnnotationImportError listing every bad record otherwise.

    Example:
        >>> parse_annotations([{"episode_id": "r1", "kind": "tag", "value": "slow"}],
        ...                   {"r1": ("a1", 40)}, default_source="me")[0].step_end
        40
    """
    out: list[Annotation] = []
    errors: list[str] = []
    for number, record in enumerate(records, start=1):
        where = f"{origin} line {number}"
        try:
            out.append(_annotation(record, visible, default_source, committed_attempts or {}))
        except (ValueError, TypeError, KeyError) as err:
            errors.append(f"{where}: {err}")
    if errors:
        shown = "\n  ".join(errors[:_MAX_ERRORS_SHOWN])
        more = (
            f"\n  ... and {len(errors) - _MAX_ERRORS_SHOWN} more" if len(errors) > _MAX_ERRORS_SHOWN else ""
        )
        raise AnnotationImportError(
            f"{len(errors)} of the annotations cannot be imported (nothing was written):\n  {shown}{more}"
        )
    return out


def _annotation(
    record: Mapping[str, Any],
    visible: Mapping[str, tuple[str, int]],
    default_source: str | None,
    committed_attempts: Mapping[str, set[str]],
) -> Annotation:
    if not isinstance(record, Mapping):
        raise TypeError(f"each line must be a JSON object, got {record!r}")
    unknown = sorted(set(record) - _FIELDS)
    if unknown:
        raise ValueError(f"unknown fields {unknown}; a line has {sorted(_FIELDS)}")
    episode_id = record.get("episode_id")
    if episode_id not in visible:
        raise ValueError(
            f"episode {episode_id!r} is not visible in the lake (unknown or deleted); "
            "check the id with `pilake sql 'SELECT episode_id FROM episodes'`"
        )
    attempt, step_count = visible[str(episode_id)]
    attempt_id = record.get("attempt_id", attempt)
    if attempt_id != attempt and attempt_id not in committed_attempts.get(str(episode_id), set()):
        raise ValueError(
            f"attempt {attempt_id!r} is not a committed attempt of {episode_id}; omit attempt_id"
        )
    source = record.get("source", default_source)
    if not source:
        raise ValueError('no source: give each line a "source" or the import a --source (who wrote them)')
    annotation = Annotation(
        episode_id=str(episode_id),
        attempt_id=str(attempt_id),
        step_start=record.get("step_start", 0),
        step_end=record.get("step_end", step_count),
        kind=record.get("kind", ""),
        value=record.get("value"),  # type: ignore[arg-type]  # checked by Annotation
        source=str(source),
        version=record.get("version", 0),
    )
    if annotation.step_end > step_count:
        raise ValueError(
            f"span [{annotation.step_start}, {annotation.step_end}) runs past the {step_count} steps of "
            f"{episode_id}; step_end is exclusive and at most the step count"
        )
    return annotation


def read_jsonl(path: Path) -> list[Any]:
    """The JSON values of a JSON Lines file (blank lines skipped); ValueError naming a bad line."""
    out = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as err:
                raise AnnotationImportError(
                    f"{path} line {number} is not JSON ({err}): {line[:80]!r}"
                ) from err
    return out


def visible_episodes(
    layout: LakeLayout, episode_ids: Sequence[str] | None = None
) -> dict[str, tuple[str, int]]:
    """episode_id -> (visible attempt_id, step_count) of the lake's visible episodes."""
    rows = read_committed(layout, ["attempt_id", "step_count"])
    out = {
        e: (a, int(n))
        for e, a, n in zip(
            rows.column("episode_id").to_pylist(),
            rows.column("attempt_id").to_pylist(),
            rows.column("step_count").to_pylist(),
            strict=True,
        )
    }
    if episode_ids is not None:
        wanted = set(episode_ids)
        out = {e: v for e, v in out.items() if e in wanted}
    return out


def add_annotations(
    layout: LakeLayout, annotations: Sequence[Annotation], *, catalog: str | None = None
) -> tuple[int, int]:
    """Append checked `annotations` to the lake, then record the lake's new rows in the catalog
    (the sync); returns (rows added to the lake, rows recorded in the catalog)."""
    store = AnnotationStore(layout)
    added = store.append(annotations)
    recorded = 0
    if catalog is not None and annotations:
        from pi_catalog import Catalog

        ids = {a.annotation_id for a in annotations}
        rows = store.read_all(sorted({a.episode_id for a in annotations}))
        rows = rows.filter(pa.array([i in ids for i in rows.column("annotation_id").to_pylist()], pa.bool_()))
        index = Catalog(catalog)
        try:
            recorded = index.record_annotations(rows)
        finally:
            index.close()
    return added, recorded


def import_annotations(
    layout: LakeLayout, path: Path, *, source: str | None = None, catalog: str | None = None
) -> AnnotationImport:
    """Import the annotations of JSON Lines file `path` (see the module docstring).

    Raises:
        AnnotationImportError: a line is not JSON or breaks a rule (nothing is written).

    Example:
        >>> import_annotations(LakeLayout("/data/lake"), Path("labels.jsonl"), source="labeler-a").added
        120
    """
    records = read_jsonl(path)
    ids = [r.get("episode_id") for r in records if isinstance(r, Mapping)]
    visible = visible_episodes(layout, [str(i) for i in ids if i is not None])
    annotations = parse_annotations(
        records,
        visible,
        default_source=source,
        committed_attempts=_attempts(layout, set(visible)),
        origin=str(path),
    )
    added, recorded = add_annotations(layout, annotations, catalog=catalog)
    return AnnotationImport(
        lines=len(annotations),
        added=added,
        episodes=len({a.episode_id for a in annotations}),
        catalog_recorded=recorded,
    )


def _attempts(layout: LakeLayout, episode_ids: set[str]) -> dict[str, set[str]]:
    from deltalake import DeltaTable

    rows = DeltaTable(layout.episodes).to_pyarrow_table(columns=["episode_id", "attempt_id"])
    out: dict[str, set[str]] = {}
    for e, a in zip(
        rows.column("episode_id").to_pylist(), rows.column("attempt_id").to_pylist(), strict=True
    ):
        if e in episode_ids:
            out.setdefault(e, set()).add(a)
    return out


def list_annotations(layout: LakeLayout, episode_id: str, *, all_versions: bool = False) -> pa.Table:
    """The annotations of `episode_id`: the current ones (all versions with `all_versions`), as
    rows of ANNOTATIONS_SCHEMA sorted by span start; empty for an episode without any, or a
    deleted one (unless `all_versions`: an operator may look at what a deleted episode had).

    Example:
        >>> list_annotations(LakeLayout("/data/lake"), "r1-000001").column("value").to_pylist()
        ['pick up the cube']
    """
    store = AnnotationStore(layout)
    rows = store.read_all([episode_id]) if all_versions else store.current([episode_id])
    return rows.sort_by([("step_start", "ascending"), ("kind", "ascending"), ("version", "descending")])
