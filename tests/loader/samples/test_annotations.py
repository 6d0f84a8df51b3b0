"""`SampleSpec(annotations=(...))`: each sample carries the value of the narrowest annotation span
holding its step, as the dataset's snapshot saw the annotations (a pin keeps its text after a
relabel); through a Loader's workers too."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from pi_format.lake import Annotation, AnnotationStore
from pi_jobs.maintenance.datasets import create_dataset
from pi_loader import Dataset, Loader, SampleSpec, ShardSpec

from tests.fixtures.lake_factory import FakeLake, write_lake

SPEC = SampleSpec(cameras=(), action_horizon=2, annotations=("instruction", "subtask"))


@pytest.fixture(scope="module")
def annotated(tmp_path_factory: pytest.TempPathFactory) -> FakeLake:
    lake = write_lake(
        tmp_path_factory.mktemp("annotated"), episodes=3, steps=10, cameras=("front",), size=(16, 16)
    )
    attempt = {e: lake.episodes[e].attempt_id for e in lake.episode_ids}
    AnnotationStore(lake.layout).append(
        [
            Annotation("ep-000", attempt["ep-000"], 0, 10, "instruction", "pick the cube", source="a"),
            Annotation("ep-000", attempt["ep-000"], 0, 4, "subtask", "reach", source="a"),
            Annotation("ep-000", attempt["ep-000"], 4, 10, "subtask", "grasp", source="a"),
            Annotation("ep-001", attempt["ep-001"], 0, 10, "instruction", "open the drawer", source="a"),
            Annotation("ep-001", attempt["ep-001"], 2, 3, "instruction", "look left", source="b"),
        ]
    )
    create_dataset(lake.layout, "v1", episode_ids=lake.episode_ids)
    return lake


def _by_step(ds: Dataset, key: str) -> dict[tuple[str, int], str]:
    batch = ds.samples(np.arange(len(ds)))
    out = {}
    for e, t, v in zip(batch["episode_id"], batch["step"], batch[key], strict=True):
        out[(str(e), int(t))] = str(v)
    return out


def test_each_sample_carries_its_spans_value(annotated: FakeLake) -> None:
    ds = Dataset(annotated.layout, spec=SPEC)
    instruction = _by_step(ds, "annotation.instruction")
    subtask = _by_step(ds, "annotation.subtask")
    assert {instruction[("ep-000", t)] for t in range(10)} == {"pick the cube"}
    assert [subtask[("ep-000", t)] for t in range(10)] == ["reach"] * 4 + ["grasp"] * 6
    # the narrowest span holding the step wins
    assert [instruction[("ep-001", t)] for t in range(4)] == [
        "open the drawer",
        "open the drawer",
        "look left",
        "open the drawer",
    ]
    assert {instruction[("ep-002", t)] for t in range(10)} == {""}  # none: padded
    batch = ds.samples(np.arange(len(ds)))
    pad = batch["annotation.instruction_is_pad"]
    assert pad.dtype == bool and pad.sum() == 10 and not batch["annotation.subtask_is_pad"][:10].any()
    assert (
        Dataset(annotated.layout, spec=SampleSpec(cameras=(), action_horizon=2)).fingerprint != ds.fingerprint
    )


def test_a_pin_keeps_the_text_it_saw_and_workers_deliver_it(annotated: FakeLake, tmp_path: Path) -> None:
    AnnotationStore(annotated.layout).append(
        [
            Annotation(
                "ep-000",
                annotated.episodes["ep-000"].attempt_id,
                0,
                10,
                "instruction",
                "pick the red cube",
                source="a",
                version=1,
            )
        ]
    )
    now = _by_step(Dataset(annotated.layout, spec=SPEC), "annotation.instruction")
    pinned = Dataset(annotated.layout, snapshot="v1", spec=SPEC)
    then = _by_step(pinned, "annotation.instruction")
    assert now[("ep-000", 3)] == "pick the red cube" and then[("ep-000", 3)] == "pick the cube"
    seen: dict[tuple[str, int], str] = {}
    with Loader(pinned, batch_size=4, shard=ShardSpec(0, 1), num_workers=1) as loader:
        for batch in loader:
            for e, t, v in zip(
                batch["episode_id"], batch["step"], batch["annotation.instruction"], strict=True
            ):
                seen[(str(e), int(t))] = str(v)
    assert seen == then


def test_unknown_kinds_are_refused() -> None:
    with pytest.raises(ValueError, match="annotations must be among"):
        SampleSpec(annotations=("caption",))
    with pytest.raises(TypeError, match="single str"):
        SampleSpec(annotations="instruction")  # type: ignore[arg-type]
