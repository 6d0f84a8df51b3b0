"""Mergeable per-episode statistics (pi_format.stats): exact moments, the quantile sketch's
merge (a pure function with a proven rank-error bound) and the episodes-row columns."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pi_format import EPISODES_SCHEMA, LakeLayout
from pi_format import stats as S
from pi_format.lake import NORM_STATS_COLUMNS, UNINDEXED_COLUMNS, ensure_lake_tables
from pi_format.stats import _grid as G
from pi_format.stats import _merge as M
from pi_format.stats import _walk as W

# -- data ------------------------------------------------------------------------------------

SHAPES = ("normal", "offset", "discrete", "constant", "heavy", "walk")


def _episode(rng: np.random.Generator, steps: int, dims: int, shape: str) -> np.ndarray:
    """One episode's [steps, dims] float32 values of a given character."""
    if shape == "normal":
        x = rng.normal(rng.normal(0, 2), rng.uniform(0.1, 3), (steps, dims))
    elif shape == "offset":  # a joint that barely moves around a large offset
        x = 1000.0 + rng.normal(0, 0.01, (steps, dims))
    elif shape == "discrete":  # a gripper: ties everywhere
        x = rng.integers(0, 3, (steps, dims)).astype(np.float64)
    elif shape == "constant":
        x = np.full((steps, dims), rng.normal())
    elif shape == "heavy":
        x = rng.standard_t(1.5, (steps, dims))
    else:
        x = np.cumsum(rng.normal(0, 0.05, (steps, dims)), axis=0) + rng.normal(0, 1, dims)
    return x.astype(np.float32)


@st.composite
def datasets(draw: st.DrawFn, max_episodes: int = 12, max_steps: int = 300) -> list[np.ndarray]:
    """Episodes of one width, each of a drawn length and character."""
    seed = draw(st.integers(0, 2**32 - 1))
    dims = draw(st.integers(1, 3))
    n = draw(st.integers(1, max_episodes))
    lengths = draw(st.lists(st.integers(1, max_steps), min_size=n, max_size=n))
    shapes = draw(st.lists(st.sampled_from(SHAPES), min_size=n, max_size=n))
    rng = np.random.default_rng(seed)
    return [_episode(rng, t, dims, s) for t, s in zip(lengths, shapes, strict=True)]


def rank_error(values: np.ndarray, x: float, q: float) -> float:
    """Distance of q·N from the rank interval [#(< x), #(<= x)] of x among `values`, over N."""
    below, upto = int((values < x).sum()), int((values <= x).sum())
    target = q * len(values)
    return max(0.0, below - target, target - upto) / len(values)


@contextlib.contextmanager
def tight_limits(model: int, z: float, head: int, threads: bool, bins: int = W._BINS) -> Iterator[None]:
    """Force the merge through its other paths on small data: brackets that miss their answer
    (a model of few knots, z = 0: widened and passed over again), rows counted whole (a short
    head), the tails in one thread or two, the knots inside a bracket in one cell (all sorted)
    or a few."""
    saved = (M._MODEL_KNOTS, M._Z, M._HEAD, M._THREADS, W._BINS)
    M._MODEL_KNOTS, M._Z, M._HEAD, M._THREADS, W._BINS = model, z, head, threads, bins
    try:
        yield
    finally:
        M._MODEL_KNOTS, M._Z, M._HEAD, M._THREADS, W._BINS = saved


def brute_quantile(sk: S.Sketches, q: float) -> np.ndarray:
    """The merge's definition, computed by sorting every knot with its mass."""
    if q in (0.0, 1.0):
        return sk.knots[:, :, 0].min(axis=0) if q == 0 else sk.knots[:, :, -1].max(axis=0)
    mass = np.diff(S.cumulative_masses(sk.counts, sk.grid), axis=1).ravel()  # [E * K]
    total = int(sk.counts.sum())
    out = []
    for d in range(sk.knots.shape[1]):
        v = sk.knots[:, d, :].ravel()
        if q <= 0.5:
            order = np.argsort(v, kind="stable")
            at = np.searchsorted(np.cumsum(mass[order]), np.ceil(q * total), side="left")
        else:
            order = np.argsort(-v, kind="stable")
            at = np.searchsorted(np.cumsum(mass[order]), np.ceil((1 - q) * total), side="left")
        out.append(v[order][at])
    return np.array(out, dtype=np.float64)


QS = (0.0, 0.001, 0.01, 0.05, 0.3, 0.5, 0.7, 0.95, 0.99, 0.999, 1.0)

# -- moments ---------------------------------------------------------------------------------


@given(datasets())
@settings(max_examples=60, deadline=None)
def test_merged_moments_equal_those_of_the_concatenation(episodes: list[np.ndarray]) -> None:
    summaries = [S.summarize(e) for e in episodes]
    n, mean, m2 = S.merge_moments(
        np.array([s.count for s in summaries]),
        np.stack([s.mean for s in summaries]),
        np.stack([s.m2 for s in summaries]),
    )
    everything = np.concatenate(episodes).astype(np.float64)
    assert n == len(everything)
    scale = np.abs(everything).max(axis=0) + 1e-30
    np.testing.assert_allclose(mean, everything.mean(axis=0), rtol=0, atol=1e-12 * float(scale.max()))
    exact_m2 = np.square(everything - everything.mean(axis=0)).sum(axis=0)
    np.testing.assert_allclose(m2, exact_m2, rtol=1e-9, atol=1e-9 * float((scale**2).max()) * 1e-6)
    lows, highs = np.min([s.min for s in summaries], axis=0), np.max([s.max for s in summaries], axis=0)
    assert np.array_equal(lows, everything.min(axis=0)) and np.array_equal(highs, everything.max(axis=0))


def test_offset_data_keeps_its_spread() -> None:
    # values 1e4 ± 1e-3: E[x²] − mean² pooling from float32 means and stds loses the spread
    rng = np.random.default_rng(0)
    episodes = [(1e4 + rng.normal(0, 1e-3, (500, 1))).astype(np.float32) for _ in range(20)]
    rows = S.merge_episode_stats(_rows(episodes), "proprio")
    exact = np.concatenate(episodes).astype(np.float64).std(axis=0)
    np.testing.assert_allclose(rows.std, exact, rtol=1e-9)


# -- quantiles -------------------------------------------------------------------------------


LIMITS = [(16, 4.0, 2, True, 1), (1, 0.0, 1, False, 2), (4, 0.5, 35, True, 64), (64, 2.0, 12, False, 3)]


@given(datasets(), st.sampled_from(LIMITS))
@settings(max_examples=80, deadline=None)
def test_merge_is_the_step_function_of_every_knot(
    episodes: list[np.ndarray], limits: tuple[int, float, int, bool, int]
) -> None:
    sk = S.decode_sketches([S.encode_sketch(e) for e in episodes])
    expected = np.stack([brute_quantile(sk, q) for q in QS])
    with tight_limits(*limits):  # widened brackets, whole rows, one thread
        assert np.array_equal(S.merge_quantiles(sk, QS), expected)
    assert np.array_equal(S.merge_quantiles(sk, QS), expected)


@given(datasets(max_episodes=20, max_steps=600), st.sampled_from([0.01, 0.05, 0.99, 0.95]))
@settings(max_examples=80, deadline=None)
def test_rank_error_stays_within_the_bound(episodes: list[np.ndarray], q: float) -> None:
    sk = S.decode_sketches([S.encode_sketch(e) for e in episodes])
    got = S.merge_quantiles(sk, [q])[0]
    everything = np.concatenate(episodes)
    bound = S.rank_error_bound(q, len(episodes), len(everything))
    for d in range(everything.shape[1]):
        assert rank_error(everything[:, d], float(got[d]), q) <= bound + 1e-12


@given(st.lists(st.integers(1, 2**32 - 1), min_size=1, max_size=50), st.integers(0, 2**32 - 1))
@settings(max_examples=60, deadline=None)
def test_knot_masses_are_those_of_the_cumulative_masses(counts: list[int], seed: int) -> None:
    n = np.array([*counts, 1, 2, 3, 300, 3000], dtype=np.int64)
    every = np.diff(S.cumulative_masses(n), axis=1)
    knots = np.random.default_rng(seed).integers(0, S.GRID_V1.knots, len(n))
    assert np.array_equal(G.knot_masses(n, knots), every[np.arange(len(n)), knots])


def test_bound_of_the_default_grid_meets_the_target() -> None:
    # ≤ 1% rank error for q01/q99 at 10,000 episodes of 300-3,000 steps, even of 300 steps each
    assert S.rank_error_bound(0.01, 10_000, 16_500_000) < 0.005
    assert S.rank_error_bound(0.99, 10_000, 3_000_000) < 0.01
    assert S.GRID_V1.knots == 35


def test_per_episode_quantiles_do_not_merge_but_sketches_do() -> None:
    # LeRobot once stored q99 = 13.59° where the true value was 39.25°: averaging per-episode
    # q99s ignores that the high values all sit in a few episodes
    rng = np.random.default_rng(1)
    calm = [rng.normal(0, 5, (1000, 1)).astype(np.float32) for _ in range(95)]
    wild = [rng.normal(40, 2, (1000, 1)).astype(np.float32) for _ in range(5)]
    episodes = calm + wild
    everything = np.concatenate(episodes)[:, 0]
    averaged = float(np.mean([np.quantile(e[:, 0], 0.99) for e in episodes]))
    sk = S.decode_sketches([S.encode_sketch(e) for e in episodes])
    merged = float(S.merge_quantiles(sk, [0.99])[0, 0])
    assert rank_error(everything, averaged, 0.99) > 0.03
    assert rank_error(everything, merged, 0.99) <= S.rank_error_bound(0.99, 100, len(everything))
    assert abs(merged - float(np.quantile(everything, 0.99))) < 1.0


def test_large_merge_matches_numpy_within_the_bound() -> None:
    rng = np.random.default_rng(2)
    episodes = [_episode(rng, int(rng.integers(50, 400)), 4, SHAPES[i % len(SHAPES)]) for i in range(600)]
    sk = S.decode_sketches(pa.array([S.encode_sketch(e) for e in episodes], pa.binary()))
    got = S.merge_quantiles(sk, [0.01, 0.99])
    everything = np.concatenate(episodes)
    for row, q in enumerate((0.01, 0.99)):
        bound = S.rank_error_bound(q, len(episodes), len(everything))
        assert all(rank_error(everything[:, d], float(got[row, d]), q) <= bound for d in range(4))


# -- bytes -----------------------------------------------------------------------------------


def test_sketch_bytes_round_trip_and_reject_what_does_not_fit() -> None:
    rng = np.random.default_rng(3)
    values = rng.normal(size=(257, 5)).astype(np.float32)
    blob = S.encode_sketch(values)
    assert len(blob) == S.SKETCH_HEADER_BYTES + 4 * S.GRID_V1.knots * 5
    sk = S.decode_sketches([blob, blob])
    assert sk.counts.tolist() == [257, 257] and sk.knots.shape == (2, 5, S.GRID_V1.knots)
    assert np.array_equal(sk.knots[1], np.sort(values, axis=0)[S.knot_indices(257)].T)
    both = S.decode_sketches([blob], [S.encode_sketch(values[:, :2])])  # two features side by side
    assert both.knots.shape == (1, 7, S.GRID_V1.knots)
    assert np.array_equal(both.knots[0, 5:], sk.knots[0, :2])
    with pytest.raises(S.SketchError, match="not a v1"):
        S.decode_sketches([b"XXXX" + blob[4:]])
    with pytest.raises(S.SketchError, match="sizes"):
        S.decode_sketches([blob, S.encode_sketch(values[:, :2])])
    with pytest.raises(S.SketchError, match="null"):
        S.decode_sketches(pa.array([blob, None], pa.binary()))
    with pytest.raises(S.SketchError, match="step counts"):
        S.decode_sketches([blob], [S.encode_sketch(values[:10])])
    with pytest.raises(ValueError, match="finite"):
        S.encode_sketch(np.array([[np.nan]], np.float32))


# -- episodes rows ---------------------------------------------------------------------------

_FIELDS = ["step_count"] + [
    f"{k}_{c}" for k in ("proprio", "action") for c in ("mean", "std", "min", "max", "mean64", "m2", "sketch")
]


def _rows(episodes: list[np.ndarray], *, old: set[int] = frozenset()) -> pa.Table:  # type: ignore[assignment]
    """Episodes rows (the statistics columns of EPISODES_SCHEMA) as the featurizer writes them;
    rows in `old` as a lake written before the float64 moments and sketches."""
    out = []
    for i, e in enumerate(episodes):
        row: dict[str, object] = {"step_count": len(e)}
        for kind, x in (("proprio", e), ("action", e[:, :1] * 2)):
            row.update(S.episode_stat_columns(kind, x))
            if i in old:
                row.update({f"{kind}_mean64": None, f"{kind}_m2": None, f"{kind}_sketch": None})
        out.append(row)
    return pa.Table.from_pylist(out, schema=pa.schema([EPISODES_SCHEMA.field(n) for n in _FIELDS]))


def test_stat_columns_are_episodes_columns() -> None:
    columns = S.episode_stat_columns("proprio", np.zeros((3, 2), np.float32))
    assert set(columns) <= set(EPISODES_SCHEMA.names)
    assert {c for c in NORM_STATS_COLUMNS if c.startswith("proprio")} <= set(columns)
    assert set(NORM_STATS_COLUMNS) <= set(UNINDEXED_COLUMNS)
    assert all(EPISODES_SCHEMA.field(c).nullable for c in UNINDEXED_COLUMNS)


def test_merge_norm_stats_from_rows_and_from_older_rows() -> None:
    rng = np.random.default_rng(4)
    episodes = [_episode(rng, int(rng.integers(20, 200)), 3, "walk") for _ in range(30)]
    everything = np.concatenate(episodes).astype(np.float64)
    stats = S.merge_norm_stats(_rows(episodes))
    p = stats["proprio"]
    assert p.exact and p.missing_sketches == 0 and p.episodes == 30 and p.count == len(everything)
    np.testing.assert_allclose(p.mean, everything.mean(axis=0), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(p.std, everything.std(axis=0), rtol=1e-10)
    assert p.rank_error_bound is not None and p.q01 is not None and p.q99 is not None
    for d in range(3):
        assert rank_error(everything[:, d], float(p.q01[d]), 0.01) <= p.rank_error_bound
        assert rank_error(everything[:, d], float(p.q99[d]), 0.99) <= p.rank_error_bound
    q01, q99 = stats["action"].require_quantiles()
    assert q01.shape == q99.shape == (1,)
    # some rows from a lake older than the sketches: moments still merge, quantiles say why not
    mixed = S.merge_norm_stats(_rows(episodes, old={0, 7}))
    assert not mixed["proprio"].exact and mixed["proprio"].missing_sketches == 2
    assert mixed["proprio"].q01 is None and mixed["proprio"].rank_error_bound is None
    np.testing.assert_allclose(mixed["proprio"].mean, everything.mean(axis=0), rtol=1e-5, atol=1e-6)
    with pytest.raises(S.MissingSketchError, match="2 of the 30 selected episodes"):
        mixed["action"].require_quantiles()
    # a table without the new columns at all (read from an old lake)
    bare = _rows(episodes).drop_columns([c for c in NORM_STATS_COLUMNS])
    assert S.merge_episode_stats(bare, "proprio").missing_sketches == 30
    with pytest.raises(ValueError, match="no episodes rows"):
        S.merge_norm_stats(_rows(episodes).slice(0, 0))


def test_rows_in_many_chunks_merge_as_in_one() -> None:
    """Rows read as one chunk per row group (group commits) give the same statistics, and
    sketch columns chunked differently decode to the same knots."""
    rng = np.random.default_rng(5)
    episodes = [_episode(rng, int(rng.integers(5, 120)), 2, s) for s in SHAPES * 4]
    rows = _rows(episodes)
    chunked = pa.Table.from_batches(rows.to_batches(max_chunksize=5))
    assert chunked.column("proprio_sketch").num_chunks > 1
    one, many = S.merge_norm_stats(rows), S.merge_norm_stats(chunked)
    for kind in ("proprio", "action"):
        for name in ("count", "mean", "std", "min", "max", "q01", "q99"):
            assert np.array_equal(getattr(one[kind], name), getattr(many[kind], name)), (kind, name)
    action = rows.column("action_sketch").combine_chunks()
    split = pa.chunked_array([action[:7], action[7:]])  # chunks unlike the proprio column's
    whole = S.decode_sketches(rows.column("proprio_sketch"), action)
    for act in (split, action):
        got = S.decode_sketches(chunked.column("proprio_sketch"), act)
        assert np.array_equal(got.knots, whole.knots) and np.array_equal(got.counts, whole.counts)


def test_old_lake_gets_the_statistics_columns(tmp_path: Path) -> None:
    from deltalake import DeltaTable

    layout = LakeLayout(str(tmp_path / "lake"))
    old_schema = pa.schema([f for f in EPISODES_SCHEMA if f.name not in UNINDEXED_COLUMNS])
    DeltaTable.create(layout.table("episodes"), schema=old_schema)
    for _ in range(2):  # idempotent
        tables = ensure_lake_tables(layout)
        schema = pa.schema(tables["episodes"].schema().to_arrow())
        assert set(UNINDEXED_COLUMNS) <= set(schema.names)
        assert all(schema.field(c).nullable for c in UNINDEXED_COLUMNS)
        assert schema.field("proprio_sketch").type == pa.binary()
