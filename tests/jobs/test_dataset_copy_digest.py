"""`pilake dataset copy` with and without the source digest, and against damaged source files:
the page CRCs are the check either way; a sha256 lands in the copy manifest only when asked for
(`--digest`) or compared (`--readback`); a steps file with a flipped page byte, or a video file
whose footer length is garbage (same size: the listing cannot tell), fails the copy naming the
file with no pin committed, and a pin over the good files beside them still copies."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from pi_format import LakeLayout
from pi_format.lake import PinStore
from pi_format.lake.page_walk import chunks
from pi_jobs.datasets import CopyError, CopyOptions, copy_dataset
from pi_jobs.datasets._manifest import CopyManifest
from pi_jobs.maintenance.datasets import create_dataset

from tests.fixtures.lake_factory import append_episodes, make_episode

SIZE = (32, 32)


@pytest.fixture()
def lake(tmp_path: Path) -> LakeLayout:
    """Four episodes in two group commits; pin `bad` reads the first group's files, `good` the second's."""
    layout = LakeLayout(str(tmp_path / "src"))
    episodes = [make_episode(i, steps=10, cameras=("front",), size=SIZE, seed=3) for i in range(4)]
    append_episodes(layout, episodes, SIZE, group=2)
    create_dataset(layout, "bad", episode_ids=[e.episode_id for e in episodes[:2]])
    create_dataset(layout, "good", episode_ids=[e.episode_id for e in episodes[2:]])
    return layout


def _manifest(dest: Path, pin: str) -> dict[str, dict[str, object]]:
    return dict(json.loads((dest / CopyManifest.relative_path(pin)).read_text())["files"])


def _files_of(layout: LakeLayout, pin: str) -> list[Path]:
    from pi_jobs.datasets._rows import source_rows
    from pi_jobs.datasets.copy import _plan

    rows = source_rows(layout, PinStore(layout).get(pin))
    return [Path(layout.root) / job.relative for job in _plan(layout, rows)]


def test_the_manifest_keeps_a_sha256_only_when_asked_or_compared(lake: LakeLayout, tmp_path: Path) -> None:
    plain = copy_dataset(lake.root, "good", str(tmp_path / "a"), show_progress=False)
    assert plain.files_sent == 2
    assert {entry["sha256"] for entry in _manifest(tmp_path / "a", "good").values()} == {""}
    for dest, options in (("b", CopyOptions(digest=True)), ("c", CopyOptions(readback=True))):
        copy_dataset(lake.root, "good", str(tmp_path / dest), options=options, show_progress=False)
        entries = _manifest(tmp_path / dest, "good")
        assert len(entries) == 2
        for relative, entry in entries.items():
            assert entry["sha256"] == hashlib.sha256((Path(lake.root) / relative).read_bytes()).hexdigest()
    with pytest.raises(ValueError, match="digest must be True or False"):
        CopyOptions(digest="yes")  # type: ignore[arg-type]


@pytest.mark.parametrize("damage", ["steps page byte", "video footer length"])
def test_a_damaged_source_file_fails_the_copy_naming_it_and_the_good_pin_beside_it_copies(
    lake: LakeLayout, tmp_path: Path, damage: str
) -> None:
    files = _files_of(lake, "bad")
    target = next(p for p in files if p.parent.name == ("steps" if damage.startswith("steps") else "video"))
    data = bytearray(target.read_bytes())
    if damage.startswith("steps"):
        # late in the largest column chunk: a page's body, whose CRC then no longer matches
        first, length, *_ = max(
            chunks(pq.ParquetFile(target).metadata, strict=False) or [], key=lambda c: c[1]
        )
        data[first + length * 3 // 4] ^= 0x10
    else:
        data[-8:-4] = b"\xff\xff\xff\x7f"  # the footer's length: 2 GiB, in a file of kilobytes
    target.write_bytes(bytes(data))
    dest = tmp_path / "dst"
    with pytest.raises(CopyError, match=rf"{target.name} failed its checks twice: .*(page|footer)"):
        copy_dataset(lake.root, "bad", str(dest), show_progress=False)
    assert PinStore(LakeLayout(str(dest))).find("bad") is None
    assert not (dest / target.parent.name / target.name).exists()
    good = copy_dataset(lake.root, "good", str(dest), show_progress=False)
    assert good.files_sent == 2 and good.rows_committed["episodes"] == 2
    assert PinStore(LakeLayout(str(dest))).get("good").content_hash == good.content_hash
