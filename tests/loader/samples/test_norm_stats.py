"""Dataset.norm_stats(): mean, std, q01 and q99 of a snapshot merged from its episodes rows,
without reading a step or a frame; older rows say what they lack."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from pi_format import LakeLayout
from pi_format.lake import EpisodeRows, LakeWriter
from pi_format.stats import episode_stat_columns, rank_error_bound
from pi_loader import Dataset, MissingSketchError, SampleSpec

from tests.fixtures.lake_factory import lake_rows, make_episode

SPEC = SampleSpec(cameras=("front",), action_horizon=2)


def _with_sketches(rows: EpisodeRows, proprio: np.ndarray, action: np.ndarray) -> EpisodeRows:
    """The fixture's episodes row with the statistics columns the featurizer writes."""
    marker = rows.episode
    for kind, values in (("proprio", proprio), ("action", action)):
        for name, value in episode_stat_columns(kind, values).items():
            at = marker.schema.get_field_index(name)
            field = marker.schema.field(at)
            marker = marker.set_column(at, field, pa.array([value], field.type))
    return EpisodeRows(episode=marker, steps=rows.steps, video=rows.video)


def _lake(root: Path, *, episodes: int, sketched: bool) -> tuple[LakeLayout, np.ndarray, np.ndarray]:
    fakes = [
        make_episode(i, steps=20 + 7 * i, cameras=("front",), size=(16, 16), seed=3) for i in range(episodes)
    ]
    rows = lake_rows(fakes, (16, 16))
    if sketched:
        rows = [_with_sketches(r, f.proprio, f.action) for r, f in zip(rows, fakes, strict=True)]
    layout = LakeLayout(str(root))
    LakeWriter(layout, writer_id="test").commit_episodes(rows)
    proprio = np.concatenate([f.proprio for f in fakes]).astype(np.float64)
    action = np.concatenate([f.action for f in fakes]).astype(np.float64)
    return layout, proprio, action


def _rank_error(values: np.ndarray, x: float, q: float) -> float:
    below, upto = int((values < x).sum()), int((values <= x).sum())
    return max(0.0, below - q * len(values), q * len(values) - upto) / len(values)


def test_norm_stats_merge_the_snapshot_without_reading_steps(tmp_path: Path) -> None:
    layout, proprio, action = _lake(tmp_path / "lake", episodes=6, sketched=True)
    ds = Dataset(layout, spec=SPEC, seed=0)
    # with every steps and video file gone, the statistics still merge: only episodes rows are read
    for table in ("steps", "video"):
        for data_file in (tmp_path / "lake" / table).glob("*.parquet"):
            data_file.unlink()
    stats = ds.norm_stats()
    assert set(stats) == {"observation.state", "action"}
    for key, values in (("observation.state", proprio), ("action", action)):
        s = stats[key]
        assert s.exact and s.missing_sketches == 0 and s.count == len(values) and s.episodes == 6
        np.testing.assert_allclose(s.mean, values.mean(axis=0), rtol=1e-12)
        np.testing.assert_allclose(s.std, values.std(axis=0), rtol=1e-10)
        assert np.array_equal(s.min, values.min(axis=0)) and np.array_equal(s.max, values.max(axis=0))
        q01, q99 = s.require_quantiles()
        bound = rank_error_bound(0.01, 6, len(values))
        assert s.rank_error_bound == pytest.approx(bound)
        for d in range(values.shape[1]):
            assert _rank_error(values[:, d], float(q01[d]), 0.01) <= bound
            assert _rank_error(values[:, d], float(q99[d]), 0.99) <= bound
    assert ds.norm_stats()["action"] is stats["action"]  # read once, then cached


def test_a_snapshot_reads_the_rows_it_pinned(tmp_path: Path) -> None:
    layout, _, _ = _lake(tmp_path / "lake", episodes=4, sketched=True)
    ds = Dataset(layout, spec=SPEC, seed=0, episode_ids=["ep-001", "ep-002"])
    more = make_episode(9, steps=30, cameras=("front",), size=(16, 16), seed=4)
    rows = [_with_sketches(r, more.proprio, more.action) for r in lake_rows([more], (16, 16))]
    LakeWriter(layout, writer_id="later").commit_episodes(rows)  # after the pin: not in it
    again = Dataset(layout, snapshot=ds.snapshot, spec=SPEC, seed=0)
    pinned, first = again.norm_stats()["action"], ds.norm_stats()["action"]
    assert pinned.count == first.count == 27 + 34
    assert pinned.q99 is not None and first.q99 is not None
    np.testing.assert_array_equal(pinned.q99, first.q99)


def test_rows_older_than_the_sketches_say_so(tmp_path: Path) -> None:
    layout, proprio, _ = _lake(tmp_path / "lake", episodes=3, sketched=False)
    s = Dataset(layout, spec=SPEC, seed=0).norm_stats()["observation.state"]
    assert not s.exact and s.missing_sketches == 3 and s.q01 is None and s.q99 is None
    np.testing.assert_allclose(s.mean, proprio.mean(axis=0), rtol=1e-5, atol=1e-6)  # pooled float32
    with pytest.raises(MissingSketchError, match="3 of the 3 selected episodes"):
        s.require_quantiles()
