"""The lifecycle on object storage: a lake on a real S3 server (SeaweedFS, the session's
`seaweed` fixture, with the production settings): pin, compact, delete, GC with zero retention
(both under the S3 maintenance lease), and the pin and the lake read back through pi_loader's S3
storage."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from deltalake import DeltaTable
from pi_format import LakeLayout
from pi_jobs.maintenance import CompactConfig, GcConfig, compact, create_dataset, delete_dataset, gc
from pi_jobs.maintenance.deletion import delete_episodes
from pi_loader import CacheConfig, Dataset, SampleSpec

from tests.fixtures.lake_factory import append_episodes, make_episode
from tests.fixtures.seaweedfs import SeaweedS3

SPEC = SampleSpec(cameras=("front",), action_horizon=2)


@pytest.fixture()
def s3(seaweed: SeaweedS3, monkeypatch: pytest.MonkeyPatch) -> Iterator[SeaweedS3]:
    # the writers (deltalake, pyarrow, the lease) take the endpoint and credentials from the
    # environment, as `pilake` exports them from the settings
    for key, value in seaweed.storage_options.items():
        monkeypatch.setenv(key, value)
    yield seaweed


def _samples(ds: Dataset) -> list[tuple[str, int, bytes]]:
    out = []
    for i in range(len(ds)):
        s: dict[str, Any] = ds[i]
        out.append(
            (str(s["episode_id"]), int(s["step"]), np.asarray(s["observation.images.front"]).tobytes())
        )
    return sorted(out)


def test_pin_compact_delete_gc_on_s3(s3: SeaweedS3, tmp_path: Path) -> None:
    layout = LakeLayout(s3.uri(f"lifecycle-{uuid.uuid4().hex[:8]}/lake"))
    fakes = [make_episode(i, steps=10, cameras=("front",), size=(16, 16), seed=0) for i in range(4)]
    append_episodes(layout, fakes, (16, 16), group=1)

    def open_(**kwargs: Any) -> Dataset:
        cache = CacheConfig(tmp_path / "cache", 10**8)
        return Dataset(layout, spec=SPEC, storage_options=s3.storage_options, cache=cache, **kwargs)

    create_dataset(layout, "all")
    before = _samples(open_(snapshot="all"))
    report = compact(layout, CompactConfig(target_file_bytes=1 << 30, small_group_bytes=1 << 29))
    assert report.files_after["steps"] == 1 and report.files_before["steps"] == 4
    delete_episodes(layout, ["ep-001"], reason="consent withdrawn", selection="ids")
    gc(layout, GcConfig(retention_hours=0))
    assert _samples(open_(snapshot="all")) == before  # the pin still holds ep-001
    delete_dataset(layout, "all")
    done = gc(layout, GcConfig(retention_hours=0))
    assert done.markers_removed == {"deleted": 1} and done.files_deleted.get("steps", 0) >= 1
    assert _samples(open_()) == [s for s in before if s[0] != "ep-001"]
    steps = DeltaTable(layout.steps, storage_options=s3.storage_options).to_pyarrow_table(
        columns=["episode_id"]
    )
    assert "ep-001" not in set(steps.column("episode_id").to_pylist())
