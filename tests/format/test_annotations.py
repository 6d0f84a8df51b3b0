"""The annotations rules of pi_format.lake.annotations: identity, current value, spans, pins'
as-of time, and the store's idempotent append on a real lake."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from pi_format.lake import Annotation, AnnotationStore, current_annotations, value_at
from pi_format.lake.annotations import annotation_rows

from tests.fixtures.lake_factory import write_lake


def _a(
    value: str,
    version: int = 0,
    *,
    start: int = 0,
    end: int = 10,
    kind: str = "instruction",
    source: str = "s",
    episode: str = "ep-000",
) -> Annotation:
    return Annotation(episode, "att", start, end, kind, value, source=source, version=version)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"kind": "caption"}, "kind must be one of"),
        ({"start": 5, "end": 5}, "is empty"),
        ({"start": -1}, "step_start must be an integer >= 0"),
        ({"kind": "quality_score", "value": "high"}, "finite number"),
        ({"kind": "quality_score", "value": "nan"}, "finite number"),
        ({"source": ""}, "source must be a non-empty string"),
    ],
)
def test_bad_annotations_are_refused_with_the_rule(kwargs: dict[str, object], match: str) -> None:
    base: dict[str, object] = {"value": "x"}
    base.update(kwargs)
    with pytest.raises(ValueError, match=match):
        _a(**base)  # type: ignore[arg-type]


def test_identity_covers_value_and_version_not_the_write_time() -> None:
    assert _a("pick").annotation_id == _a("pick").annotation_id
    assert _a("pick").annotation_id != _a("place").annotation_id
    assert _a("pick", 1).annotation_id != _a("pick", 2).annotation_id
    first, second = annotation_rows([_a("pick")], 1), annotation_rows([_a("pick")], 2)
    assert first.column("annotation_id") == second.column("annotation_id")


def test_highest_version_is_current_per_span_kind_and_source() -> None:
    rows = pa.concat_tables(
        [
            annotation_rows([_a("old", 1), _a("other source", 0, source="t")], 100),
            annotation_rows([_a("new", 2), _a("reach", 0, start=0, end=4, kind="subtask")], 200),
            annotation_rows([_a("x", 0, episode="ep-009")], 300),
        ]
    )
    now = current_annotations(rows, ["ep-000"])
    got = sorted(
        zip(
            now.column("kind").to_pylist(),
            now.column("source").to_pylist(),
            now.column("value").to_pylist(),
            strict=True,
        )
    )
    assert got == [
        ("instruction", "s", "new"),
        ("instruction", "t", "other source"),
        ("subtask", "s", "reach"),
    ]
    # a pin created at t=150 sees version 1, not version 2 written after it
    then = current_annotations(rows, ["ep-000"], as_of_ns=150, kinds=["instruction"])
    assert sorted(then.column("value").to_pylist()) == ["old", "other source"]
    assert current_annotations(rows, []).num_rows == 0


def test_value_at_takes_the_narrowest_span_holding_the_step() -> None:
    rows = current_annotations(
        annotation_rows([_a("whole", end=20, kind="subtask"), _a("grasp", start=5, end=8, kind="subtask")], 1)
    )
    assert [value_at(rows, "ep-000", t, "subtask") for t in (4, 5, 7, 8)] == [
        "whole",
        "grasp",
        "grasp",
        "whole",
    ]
    assert value_at(rows, "ep-000", 20, "subtask") is None
    assert value_at(rows, "ep-000", 3, "instruction") is None


def test_store_appends_once_and_hides_nothing_of_visible_episodes(tmp_path: Path) -> None:
    lake = write_lake(tmp_path / "lake", episodes=2, steps=10, cameras=("front",), size=(16, 16))
    store = AnnotationStore(lake.layout)
    assert store.version() is not None and store.current().num_rows == 0
    batch = [_a("pick", 1), _a("go", 1, episode="ep-001"), _a("pick", 1)]
    assert store.append(batch) == 2
    assert store.append(batch) == 0  # a rerun adds nothing
    assert store.append([_a("pick", 2)]) == 1
    now = store.current()
    assert sorted(
        zip(
            now.column("episode_id").to_pylist(),
            now.column("value").to_pylist(),
            now.column("version").to_pylist(),
            strict=True,
        )
    ) == [("ep-000", "pick", 2), ("ep-001", "go", 1)]
    assert store.read_all(["ep-000"]).num_rows == 2  # both versions kept
