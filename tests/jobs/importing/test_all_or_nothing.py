"""Imports are all or nothing (issue 31): a dataset that fails while being read leaves nothing in
any spool, an info.json that disagrees with the data is refused with the difference named, a
feature the lake has no column for is refused unless dropped by name, declared sizes are
checked before anything is allocated, and seeded byte damage to every file of a LeRobot dataset
or an HDF5 file gives a clear DatasetImportError or a whole import, never a half one.

The failing imports go through `run_import` itself, with an uploader pointed at a port nothing
listens on: the read phase fails before any Kafka client is made, so no broker is needed to
show that nothing was spooled. The integration test beside (test_all_or_nothing_stream.py
shape, in test_lerobot/test_hdf5) sends the good imports through the real broker and job.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import h5py
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pi_ingest import UploaderConfig
from pi_jobs.importing import DatasetImportError, ImportConfig, ImportOptions, read_hdf5, run_import
from pi_jobs.importing.lerobot import read_lerobot
from pi_jobs.importing.staging import stage_import
from pi_jobs.ops._spools import find_spools, spool_leftovers

from tests.fixtures.hdf5_files import write_robomimic

DATASET = Path(__file__).resolve().parents[2] / "fixtures" / "lerobot_v3" / "dataset"
EPISODES_META = "meta/episodes/chunk-000/file-000.parquet"
DATA = "data/chunk-000/file-000.parquet"
VIDEO = "videos/observation.images.top/chunk-000/file-000.mp4"
NOTHING_SENT = "Nothing of this import was spooled or sent"


def _copy(tmp_path: Path, name: str = "ds") -> Path:
    out = tmp_path / name
    shutil.copytree(DATASET, out)
    return out


def _config(tmp_path: Path) -> ImportConfig:
    # port 9: nothing listens; a failed read must fail before any Kafka client exists
    return ImportConfig(
        UploaderConfig("127.0.0.1:9", tmp_path / "home" / "spool-import"), str(tmp_path / "lake")
    )


def _assert_nothing_left(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert not list(home.rglob("*.piep")), sorted(home.rglob("*"))
    assert not spool_leftovers(find_spools(home))
    assert not [p for p in home.rglob(".staging-*")]


def _edit_episodes_meta(root: Path, episode: int, **columns: int) -> None:
    table = pq.read_table(root / EPISODES_META)
    for name, value in columns.items():
        values = table.column(name).to_pylist()
        values[episode] = value
        table = table.set_column(
            table.column_names.index(name), name, pa.array(values, table.schema.field(name).type)
        )
    pq.write_table(table, root / EPISODES_META)


def _edit_info(root: Path, edit: dict[str, object]) -> None:
    info = json.loads((root / "meta" / "info.json").read_text())
    info.update(edit)
    (root / "meta" / "info.json").write_text(json.dumps(info))


# -- the three failures the tester saw: each after episodes were read ------------------------


def test_a_missing_video_file_sends_nothing(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    # episode 2's segment in a second video file that is not there (episodes 0 and 1 read fine)
    _edit_episodes_meta(root, 2, **{"videos/observation.images.top/file_index": 1})
    said: list[str] = []
    with pytest.raises(
        DatasetImportError, match=rf"episode 2: camera .*file-001.mp4 is missing.*{NOTHING_SENT}"
    ):
        run_import(read_lerobot(root), _config(tmp_path), say=said.append)
    assert sum("staged" in line for line in said) == 2  # two episodes were read and staged
    _assert_nothing_left(tmp_path)


def test_a_truncated_data_parquet_sends_nothing(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    data = (root / DATA).read_bytes()
    (root / "data/chunk-000/file-001.parquet").write_bytes(data[: len(data) // 2])
    _edit_episodes_meta(root, 2, **{"data/file_index": 1})
    with pytest.raises(
        DatasetImportError, match=rf"file-001.parquet cannot be read .*restore it.*{NOTHING_SENT}"
    ):
        run_import(read_lerobot(root), _config(tmp_path), say=lambda _: None)
    _assert_nothing_left(tmp_path)


def test_hdf5_fifth_demo_with_ragged_arrays_sends_nothing(tmp_path: Path) -> None:
    path = write_robomimic(tmp_path / "five.hdf5", demos=6, steps=10)
    with h5py.File(path, "r+") as f:
        actions = f["data/demo_4/actions"][()]
        del f["data/demo_4/actions"]
        f["data/demo_4/actions"] = actions[:-3]
    with pytest.raises(
        DatasetImportError, match=rf"five.hdf5#data/demo_4: arrays of different lengths.*{NOTHING_SENT}"
    ):
        run_import(read_hdf5(path), _config(tmp_path), say=lambda _: None)
    _assert_nothing_left(tmp_path)


def test_a_killed_import_leaves_only_a_staging_dir_that_the_next_removes(tmp_path: Path) -> None:
    root = tmp_path / "home" / "spool-import"
    stale = root / ".staging-999999999-dead"  # no such process
    stale.mkdir(parents=True)
    (stale / "x.piep").write_bytes(b"half")
    assert [x.kind for x in spool_leftovers(find_spools(tmp_path / "home"))] == ["staging"]
    said: list[str] = []
    staged = stage_import(read_lerobot(DATASET), root, in_lake=set(), say=said.append)
    assert not stale.exists() and any("killed while reading" in line for line in said)
    assert len(staged.staged) == 3 and sorted(p.name for p in staged.spool_dir.glob("*.piep")) == sorted(
        f"{e}.piep" for e in staged.staged
    )
    # a rerun of the same import finds the same spool; the bytes are the same: nothing added twice
    again = stage_import(read_lerobot(DATASET), root, in_lake=set())
    assert again.spool_dir == staged.spool_dir and len(list(again.spool_dir.glob("*.piep"))) == 3
    # the same dataset with another resize policy would send other bytes: refused, not mixed
    with pytest.raises(DatasetImportError, match=r"still pending .* other content"):
        stage_import(
            read_lerobot(DATASET, options=ImportOptions(resize="stretch", target_width=320)),
            root,
            in_lake=set(),
        )
    assert len(list(root.rglob("*.piep"))) == 3 and not list(root.glob(".staging-*"))


def test_a_rerun_whose_encoder_gives_other_bytes_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Decoding and re-encoding the same source video gave other H.264 bytes about once in 25
    runs: a rerun with the same options must resume its spool, not be refused as "other content"."""
    import pi_format.video

    root = tmp_path / "home" / "spool-import"
    first = stage_import(read_lerobot(DATASET), root, in_lake=set())
    pending = {p.name: p.read_bytes() for p in first.spool_dir.glob("*.piep")}
    encode = pi_format.video.encode_mp4
    monkeypatch.setattr(pi_format.video, "encode_mp4", lambda *a, **k: encode(*a, **{**k, "crf": 30}))
    again = stage_import(read_lerobot(DATASET), root, in_lake=set())
    assert again.spool_dir == first.spool_dir and sorted(again.staged) == sorted(first.staged)
    # the earlier run's bundles stay as they were: nothing is sent twice or mixed
    assert {p.name: p.read_bytes() for p in again.spool_dir.glob("*.piep")} == pending


# -- info.json is checked against the data ----------------------------------------------------


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            {"fps": 30},
            r"says fps 30, the timestamps in data/chunk-000/file-000.parquet step by 0.100000 s "
            r"\(10.000 fps\)",
        ),
        ({"total_frames": 40}, r"says total_frames 40, meta/episodes holds 36"),
        ({"total_episodes": 2}, r"says total_episodes 2, meta/episodes holds 3"),
        ({"fps": "ten"}, r"fps must be a number > 0, got 'ten'"),
    ],
)
def test_info_json_that_disagrees_with_the_data_is_refused(
    tmp_path: Path, edit: dict[str, object], message: str
) -> None:
    root = _copy(tmp_path)
    _edit_info(root, edit)
    with pytest.raises(DatasetImportError, match=message):
        list(read_lerobot(root))


def test_declared_shapes_must_match_the_arrays(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    info = json.loads((root / "meta" / "info.json").read_text())
    info["features"]["observation.state"]["shape"] = [8]
    _edit_info(root, {"features": info["features"]})
    with pytest.raises(
        DatasetImportError, match=r"observation.state has shape \[8\], the rows of .* have 6 values"
    ):
        list(read_lerobot(root))
    # a declared shape of 10^12 values allocates nothing: it is compared, never used for sizing
    info["features"]["observation.state"]["shape"] = [10**12]
    _edit_info(root, {"features": info["features"]})
    with pytest.raises(DatasetImportError, match=r"shape \[1000000000000\], the rows"):
        list(read_lerobot(root))
    info["features"]["observation.state"]["shape"] = [6]
    info["features"]["observation.images.top"]["shape"] = [48, 64, 3]
    _edit_info(root, {"features": info["features"]})
    with pytest.raises(
        DatasetImportError, match=r"observation.images.top is 64x48 \(width x height\), its frames are 64x64"
    ):
        list(read_lerobot(root))


def test_a_feature_without_a_lake_column_is_refused_unless_dropped(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    info = json.loads((root / "meta" / "info.json").read_text())
    info["features"]["observation.effort"] = {"dtype": "float32", "shape": [3], "names": None}
    _edit_info(root, {"features": info["features"]})
    data = pq.read_table(root / DATA)
    effort = pa.array([[0.5, 1.0, 1.5]] * data.num_rows, pa.list_(pa.float32(), 3))
    pq.write_table(data.append_column("observation.effort", effort), root / DATA)
    with pytest.raises(
        DatasetImportError, match=r"features \['observation.effort'\] have no column .*--drop-feature"
    ):
        list(read_lerobot(root))
    with pytest.raises(DatasetImportError, match=r"--drop-feature \['observation.efort'\] names no feature"):
        list(read_lerobot(root, options=ImportOptions(drop_features=("observation.efort",))))
    with pytest.raises(DatasetImportError, match="is a feature the lake keeps"):
        list(read_lerobot(root, options=ImportOptions(drop_features=("observation.effort", "action"))))
    items = list(read_lerobot(root, options=ImportOptions(drop_features=("observation.effort",))))
    assert [i.episode.step_count for i in items] == [12, 9, 15]


def test_an_hdf5_dataset_the_layout_does_not_import_is_refused_unless_dropped(tmp_path: Path) -> None:
    path = write_robomimic(tmp_path / "torques.hdf5", demos=2, steps=10)
    with h5py.File(path, "r+") as f:
        f["data/demo_1"].create_dataset("joint_torques", data=np.zeros((11, 7)))
    items = read_hdf5(path)
    next(items)  # rewards and dones: documented as not imported
    with pytest.raises(
        DatasetImportError, match=r"demo_1: datasets \['joint_torques'\] have no column .*--drop-feature"
    ):
        next(items)
    kept = list(read_hdf5(path, options=ImportOptions(drop_features=("joint_torques",))))
    assert [i.episode.step_count for i in kept] == [10, 11]


def test_the_command_takes_the_import_options() -> None:
    from pi_jobs.cli import build_parser

    args = build_parser().parse_args(
        ["import", "lerobot", "ds", "--resize", "center-crop", "--drop-feature", "a", "--drop-feature", "b"]
    )
    assert (args.resize, args.drop_feature, args.max_array_mb) == ("center-crop", ["a", "b"], 4096.0)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["import", "hdf5", "x.hdf5", "--resize", "squash"])


def test_an_hdf5_dataset_declared_huge_is_refused_before_it_is_read(tmp_path: Path) -> None:
    path = write_robomimic(tmp_path / "huge.hdf5", demos=2, steps=10)
    with h5py.File(path, "r+") as f:
        del f["data/demo_1/actions"]
        # 2^40 x 7 float64 = 56 TiB declared, a few KB on disk (chunked, never written)
        f["data/demo_1"].create_dataset("actions", shape=(2**40, 7), dtype="f8", chunks=(1024, 7))
        f["data/demo_0"].attrs["num_samples"] = 99
    assert path.stat().st_size < 1_000_000
    with pytest.raises(
        DatasetImportError, match=r"demo_0: arrays of different lengths .*num_samples \(attribute\)': 99"
    ):
        list(read_hdf5(path))
    with h5py.File(path, "r+") as f:
        f["data/demo_0"].attrs["num_samples"] = 10
    items = read_hdf5(path)
    next(items)
    with pytest.raises(
        DatasetImportError,
        match=r"demo_1: dataset 'actions' declares shape \(1099511627776, 7\) \(57344.00 GiB\), over",
    ):
        next(items)


# -- resize policy ----------------------------------------------------------------------------


def test_resize_policies_fit_a_4_3_camera_to_the_lake(tmp_path: Path) -> None:
    from pi_jobs.importing import fit_frames

    video = np.full((2, 480, 640, 3), 200, np.uint8)
    boxed = fit_frames(video, ImportOptions())
    assert boxed.shape == (2, 640, 640, 3) and boxed[:, :80].max() == 0 and boxed[:, 80:560].min() == 200
    assert fit_frames(video, ImportOptions(resize="center-crop")).shape == (2, 480, 480, 3)
    assert fit_frames(video, ImportOptions(resize="stretch")).shape == (2, 480, 640, 3)
    wide = ImportOptions(target_width=320, target_height=240)
    assert fit_frames(video, wide) is video  # already the lake's ratio
    assert fit_frames(np.zeros((1, 640, 480, 3), np.uint8), wide).shape == (1, 640, 853, 3)
    with pytest.raises(
        ValueError, match=r"resize must be one of \['letterbox', 'center-crop', 'stretch'\], got 'squash'"
    ):
        ImportOptions(resize="squash")


# -- generated damage -------------------------------------------------------------------------


def _damage(path: Path, rng: random.Random) -> str:
    data = bytearray(path.read_bytes())
    kind = rng.choice(["truncate", "zero", "bitflip"])
    if kind == "truncate":
        data = data[: rng.randrange(len(data))]
    elif kind == "zero":
        start = rng.randrange(len(data))
        data[start : start + rng.randint(1, 4096)] = bytes(len(data[start : start + 4096]))[
            : rng.randint(1, 4096)
        ]
    else:
        for _ in range(rng.randint(1, 8)):
            at = rng.randrange(len(data))
            data[at] ^= 1 << rng.randrange(8)
    path.write_bytes(bytes(data))
    return kind


@pytest.mark.parametrize("seed", range(24))
def test_seeded_damage_to_a_lerobot_dataset_is_all_or_nothing(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    root = _copy(tmp_path)
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.name != "stats.json")
    victim = rng.choice(files)
    kind = _damage(victim, rng)
    spool_root = tmp_path / "home" / "spool-import"
    try:
        staged = stage_import(read_lerobot(root), spool_root, in_lake=set())
    except DatasetImportError as err:
        assert NOTHING_SENT in str(err) and (str(root) in str(err) or "episode" in str(err)), (
            kind,
            victim,
            err,
        )
        _assert_nothing_left(tmp_path)
    else:  # harmless (a flip the codec absorbs, a byte no reader looks at): the whole import
        assert len(staged.staged) == 3, (kind, victim)
        assert len(list(staged.spool_dir.glob("*.piep"))) == 3


@pytest.mark.parametrize("seed", range(12))
def test_seeded_damage_to_an_hdf5_file_is_all_or_nothing(tmp_path: Path, seed: int) -> None:
    rng = random.Random(1000 + seed)
    path = write_robomimic(tmp_path / "lift.hdf5", demos=4, steps=10)
    kind = _damage(path, rng)
    spool_root = tmp_path / "home" / "spool-import"
    try:
        staged = stage_import(read_hdf5(path), spool_root, in_lake=set())
    except DatasetImportError as err:
        assert NOTHING_SENT in str(err) and "lift.hdf5" in str(err), (kind, err)
        _assert_nothing_left(tmp_path)
    else:
        assert len(staged.staged) == 4, kind


# -- through the real broker and stream job ---------------------------------------------------


@pytest.mark.integration
def test_the_next_import_commits_exactly_its_own_episodes_with_their_annotations(
    tmp_path: Path, broker: str, stack_settings: object
) -> None:
    """A failed import leaves nothing; an earlier import's episodes still pending in its own spool
    (killed after spooling) and a leftover in the old shared layout are not sent by the next,
    unrelated import, which commits exactly its own episodes with their instructions; rerunning
    the earlier import resumes it, annotations included; the audit of every spool agrees."""
    import uuid

    from confluent_kafka.admin import AdminClient, NewTopic
    from pi_format import LakeLayout
    from pi_format.lake import AnnotationStore, read_committed
    from pi_format.wire import encode_episode
    from pi_ingest import Spool
    from pi_jobs.ops.audit import audit

    from tests.fixtures.stream_jobs import small_stream_job

    run = uuid.uuid4().hex[:8]
    raw_topic, ack_topic = f"aon-raw-{run}", f"aon-ack-{run}"
    admin = AdminClient({"bootstrap.servers": broker})
    for future in admin.create_topics([NewTopic(raw_topic, 2, 1), NewTopic(ack_topic, 1, 1)]).values():
        future.result(timeout=10)
    job = small_stream_job(
        broker=broker,
        root=tmp_path,
        jar_dir=stack_settings.jar_dir,  # type: ignore[attr-defined]
        raw_topic=raw_topic,
        ack_topic=ack_topic,
        group_id=f"aon-{run}",
    )
    home = tmp_path / "home"
    uploader = UploaderConfig(broker, home / "spool-import", raw_topic=raw_topic, ack_topic=ack_topic)
    config = ImportConfig(
        uploader, job.lake_root, stream=job, catalog_path=job.catalog_path, confirm_timeout_s=120
    )
    broken = _copy(tmp_path, "broken")
    _edit_episodes_meta(broken, 2, **{"videos/observation.images.top/file_index": 1})
    with pytest.raises(DatasetImportError, match=NOTHING_SENT):
        run_import(read_lerobot(broken), config, say=lambda _: None)
    _assert_nothing_left(tmp_path)
    lift = write_robomimic(tmp_path / "lift.hdf5", demos=2, steps=10)
    earlier = stage_import(read_hdf5(lift), home / "spool-import", in_lake=set())  # spooled, never sent
    legacy = next(read_hdf5(write_robomimic(tmp_path / "old.hdf5", demos=1, steps=10, seed=4))).episode
    Spool(home / "spool-import").add(legacy.episode_id, encode_episode(legacy))  # the old shared spool

    report = run_import(read_lerobot(DATASET), config, say=lambda _: None)
    layout = LakeLayout(job.lake_root)
    visible = set(read_committed(layout, ["episode_id"]).column("episode_id").to_pylist())
    assert len(report.committed) == 3 and visible == set(report.committed), report.lines()
    notes = AnnotationStore(layout).current(sorted(visible), kinds=["instruction"])
    assert notes.num_rows == 4 and report.annotations_added == 4  # episode 1 has two tasks

    resumed = run_import(read_hdf5(lift), config, say=lambda _: None)
    assert sorted(resumed.committed) == sorted(earlier.staged) and resumed.spool_dir == str(earlier.spool_dir)
    lifted = AnnotationStore(layout).current(sorted(earlier.staged), kinds=["instruction"])
    assert lifted.column("value").to_pylist() == ["Lift", "Lift"]
    result = audit(layout, spool_dirs=find_spools(home), catalog_path=job.catalog_path)
    # only the legacy leftover is missing (it was never sent), and the audit says so
    assert result.missing_ids == (legacy.episode_id,) and result.visible == 5, result
    assert any(legacy.episode_id in line for line in result.spool_leftovers)
