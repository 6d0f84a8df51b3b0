"""A copy into a destination that holds nothing yet: every file goes out while the destination's
tables are made, the commits wait for them, and a destination that cannot make them is the fault
reported (nothing committed); the copy manifest is written behind the transfers, and a write of it
that fails fails the copy instead of being lost."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from deltalake import DeltaTable
from pi_format import LakeLayout
from pi_format.lake import PinStore
from pi_jobs.datasets import CopyError, copy_dataset
from pi_jobs.datasets._manifest import MANIFEST_DIR, CopyManifest, DoneFile
from pi_jobs.datasets._stores import LakeStore
from pi_jobs.datasets.copy import plan_copy
from pi_jobs.maintenance.datasets import create_dataset

from tests.fixtures.lake_factory import append_episodes, make_episode

SIZE = (32, 32)


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> LakeLayout:
    layout = LakeLayout(str(tmp_path_factory.mktemp("fresh") / "lake"))
    episodes = [make_episode(i, steps=12, cameras=("front",), size=SIZE, seed=0) for i in range(4)]
    append_episodes(layout, episodes, SIZE, group=2)
    create_dataset(layout, "pick-v1")
    return layout


def _committed(root: Path, table: str) -> set[str]:
    return {Path(p).name for p in DeltaTable(str(root / table)).file_uris()}


def test_a_fresh_destination_sends_every_file_and_commits_them_after_its_tables_are_made(
    lake: LakeLayout, tmp_path: Path
) -> None:
    dest = tmp_path / "new"
    assert LakeStore.open(str(dest)).holds_nothing(but=MANIFEST_DIR)  # not even made yet
    plan = plan_copy(lake.root, "pick-v1", str(dest))
    assert plan.to_send == plan.jobs and plan.jobs
    assert set(plan.dest_tables()) >= {"episodes", "steps", "video"}
    report = copy_dataset(lake.root, "pick-v1", str(dest), show_progress=False)
    assert report.files_sent == len(plan.jobs)
    for table in ("steps", "video"):
        sent = {j.relative.split("/", 1)[1] for j in plan.jobs if j.relative.startswith(f"{table}/")}
        assert _committed(dest, table) == sent
    assert PinStore(LakeLayout(str(dest))).get("pick-v1").content_hash == report.content_hash
    # no longer fresh: the plan reads its Delta log and sends nothing again
    assert not LakeStore.open(str(dest)).holds_nothing(but=MANIFEST_DIR)
    assert plan_copy(lake.root, "pick-v1", str(dest)).to_send == []
    assert copy_dataset(lake.root, "pick-v1", str(dest), show_progress=False).files_sent == 0


def test_a_leftover_file_makes_the_destination_not_fresh_and_is_checked_in_place(
    lake: LakeLayout, tmp_path: Path
) -> None:
    """A copy killed before its tables were made left a file: the next plan is the full one
    (tables first), and the file of the source's size is checked in place, not sent again."""
    first = plan_copy(lake.root, "pick-v1", str(tmp_path / "probe")).jobs[0]
    dest = tmp_path / "killed"
    (dest / first.relative).parent.mkdir(parents=True)
    (dest / first.relative).write_bytes((Path(lake.root) / first.relative).read_bytes())
    assert not LakeStore.open(str(dest)).holds_nothing(but=MANIFEST_DIR)
    report = copy_dataset(lake.root, "pick-v1", str(dest), show_progress=False)
    assert report.files_already_there == 1 and report.files_sent == report.files - 1


def test_a_fresh_destination_that_cannot_make_its_tables_is_the_fault_and_commits_nothing(
    lake: LakeLayout, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Test double: a store that takes objects but refuses the tables' first commits (an S3
    policy that allows PUTs under data prefixes only) cannot be staged on a local disk, so the
    table creation is made to fail; the transfers, commits and refusal are the real ones."""
    import pi_format.lake as lake_api

    started = threading.Event()

    def refusing_ensure_lake_tables_double(layout: LakeLayout) -> dict[str, object]:
        started.set()
        raise OSError(f"injected: {layout.root} refuses the tables' first commits")

    monkeypatch.setattr(lake_api, "ensure_lake_tables", refusing_ensure_lake_tables_double)
    dest = tmp_path / "refusing"
    with pytest.raises(CopyError, match=r"refuses writes .*refuses the tables' first commits"):
        copy_dataset(lake.root, "pick-v1", str(dest), show_progress=False)
    assert started.is_set()
    assert list((dest / "video").glob("part-*.parquet"))  # the files went out meanwhile
    assert PinStore(LakeLayout(str(dest))).find("pick-v1") is None
    assert not (dest / "episodes" / "_delta_log").exists()
    monkeypatch.undo()
    good = copy_dataset(lake.root, "pick-v1", str(tmp_path / "good"), show_progress=False)
    assert PinStore(LakeLayout(str(tmp_path / "good"))).get("pick-v1").content_hash == good.content_hash


def test_a_manifest_write_behind_that_fails_is_raised_by_the_next_flush(tmp_path: Path) -> None:
    (tmp_path / MANIFEST_DIR).write_text("a file where the manifest's directory goes")
    manifest = CopyManifest(store=LakeStore.open(str(tmp_path)), pin="pick-v1", flush_s=0.0)
    manifest.add("steps/part-a.parquet", DoneFile(10, "", 1, ""))  # written behind: fails there
    with pytest.raises(OSError):
        manifest.flush()
    assert (tmp_path / MANIFEST_DIR).read_text().startswith("a file")
    good = CopyManifest(store=LakeStore.open(str(tmp_path / "ok")), pin="pick-v1", flush_s=0.0)
    good.add("steps/part-a.parquet", DoneFile(10, "", 1, ""))
    good.flush()
    assert CopyManifest.load(good.store, "pick-v1").done == {"steps/part-a.parquet": DoneFile(10, "", 1, "")}


def test_a_copy_whose_manifest_cannot_be_written_fails_and_commits_no_pin(
    lake: LakeLayout, tmp_path: Path
) -> None:
    dest = tmp_path / "blocked"
    dest.mkdir()
    (dest / MANIFEST_DIR).write_text("a file where the manifest's directory goes")
    with pytest.raises((CopyError, OSError)):
        copy_dataset(lake.root, "pick-v1", str(dest), show_progress=False)
    assert PinStore(LakeLayout(str(dest))).find("pick-v1") is None
    assert (dest / MANIFEST_DIR).read_text().startswith("a file")
