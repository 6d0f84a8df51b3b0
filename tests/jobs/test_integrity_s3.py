"""`pilake verify` and `pilake repair` on a lake on a real S3 server (SeaweedFS, the session's
`seaweed` fixture, production settings): a flipped byte in a steps page is found, the episode is
rebuilt from raw under the S3 maintenance lease, and the samples read back through pi_loader's S3
storage equal the clean ones."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pi_format import LakeLayout
from pi_format.lake import table_filesystem
from pi_jobs.integrity import RepairConfig, VerifyConfig, repair_lake, verify_lake
from pi_loader import CacheConfig, Dataset, SampleSpec
from pyarrow import fs as pafs

from tests.fixtures.raw_lake import write_raw_lake
from tests.fixtures.seaweedfs import SeaweedS3

pytestmark = pytest.mark.integration

SPEC = SampleSpec(action_horizon=2)


@pytest.fixture()
def s3(seaweed: SeaweedS3, monkeypatch: pytest.MonkeyPatch) -> Iterator[SeaweedS3]:
    for key, value in seaweed.storage_options.items():  # as `pilake` exports the settings
        monkeypatch.setenv(key, value)
    yield seaweed


def _proprio_and_actions(layout: LakeLayout, s3: SeaweedS3, cache: Path) -> dict[tuple[str, int], Any]:
    ds = Dataset(layout, spec=SPEC, storage_options=s3.storage_options, cache=CacheConfig(cache, 10**8))
    out = {}
    for i in range(len(ds)):
        s = ds[i]
        out[(str(s["episode_id"]), int(np.asarray(s["step"])))] = (s["observation.state"], s["action"])
    return out


def test_verify_and_repair_on_s3(s3: SeaweedS3, tmp_path: Path) -> None:
    layout = LakeLayout(s3.uri(f"integrity-{uuid.uuid4().hex[:8]}/lake"))
    write_raw_lake(layout.root, robots=1, episodes_per_robot=2)
    clean = _proprio_and_actions(layout, s3, tmp_path / "cache-clean")
    assert verify_lake(layout, VerifyConfig()).exit_code == 0
    fs, base = table_filesystem(layout.steps)
    (info,) = [f for f in fs.get_file_info(pafs.FileSelector(base)) if f.path.endswith(".parquet")]
    with fs.open_input_file(info.path) as f:
        data = bytearray(f.read())
    group = pq.ParquetFile(pa.BufferReader(bytes(data))).metadata.row_group(0)
    columns = [group.column(j) for j in range(group.num_columns)]
    (column,) = [c for c in columns if c.path_in_schema.startswith("action")]
    data[column.data_page_offset + column.total_compressed_size - 5] ^= 0x22
    with fs.open_output_stream(info.path) as f:  # the same key, the same size: a damaged object
        f.write(bytes(data))
    report = verify_lake(layout, VerifyConfig())
    assert report.exit_code == 2
    assert [(f.table, f.row_group, f.kind) for f in report.faults] == [("steps", 0, "page_crc")]
    result = repair_lake(layout, report, RepairConfig())
    assert len(result.repaired) == 1 and result.files_rewritten, result.as_dict()
    assert verify_lake(layout, VerifyConfig()).exit_code == 0
    after = _proprio_and_actions(layout, s3, tmp_path / "cache-after")
    assert set(after) == set(clean)
    for key, (state, action) in after.items():
        assert np.array_equal(state, clean[key][0]) and np.array_equal(action, clean[key][1]), key
