"""The whole path on real components: simulator -> uploader (spool, idempotent producer) ->
Tansu broker -> PyFlink stream job -> Delta tables + chdb catalog -> end-to-end acks ->
pi_loader in a torch DataLoader.

Every simulated episode must be visible exactly once (also when it is uploaded twice), proprio
and actions must equal the originals bit for bit, and frames must match the rendered originals
within PSNR_MIN_DB after two lossy encodes (robot H.264 at 320x240, lake H.264 at 224x224).
"""

from __future__ import annotations

from typing import Any

import av
import numpy as np
import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable
from pi_format import LakeLayout
from pi_format.lake import read_visible

PSNR_MIN_DB = 28.0
ACTION_HORIZON = 8

pytestmark = pytest.mark.integration


def _psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return float("inf") if mse == 0 else 10.0 * np.log10(255.0**2 / mse)


def _resized(frame: np.ndarray, width: int, height: int) -> np.ndarray:
    vf = av.VideoFrame.from_ndarray(frame, format="rgb24")
    return np.asarray(vf.reformat(width=width, height=height, format="rgb24").to_ndarray())


@pytest.fixture(scope="module")
def landed(broker, stack_settings, tmp_path_factory):
    """Run the path once for the module; yields (settings, simulated episodes, upload report)."""
    from confluent_kafka.admin import AdminClient, NewTopic
    from pi_ingest.simulator import SimulationConfig, simulate_fleet
    from pi_ingest.uploader import Uploader, UploaderConfig
    from pi_jobs.stream import StreamJobConfig, run_stream_job

    raw_topic, ack_topic = "e2e.episodes.raw", "e2e.episodes.ack"
    admin = AdminClient({"bootstrap.servers": broker})
    for future in admin.create_topics(
        [NewTopic(raw_topic, num_partitions=4, replication_factor=1), NewTopic(ack_topic, 1, 1)]
    ).values():
        future.result(timeout=10)

    sim = SimulationConfig(robots=3, episodes_per_robot=1, duration_s=2.0, seed=4242)
    episodes = list(simulate_fleet(sim))
    work = tmp_path_factory.mktemp("e2e")
    uploader_config = UploaderConfig(
        bootstrap_servers=broker, spool_dir=work / "spool", raw_topic=raw_topic, ack_topic=ack_topic
    )
    with Uploader(uploader_config) as uploader:
        for simulated in episodes:
            uploader.submit(simulated.episode)
        uploader.send_pending()
        # A robot that lost its connection re-sends an episode: the lake must show it once.
        uploader.spool.mark_sent(episodes[0].episode.episode_id, 0)
        uploader.send_pending()
        config = StreamJobConfig(
            bootstrap_servers=broker,
            lake_root=str(work / "lake"),
            catalog_path=str(work / "catalog"),
            work_dir=work / "flink",
            jar_dir=stack_settings.jar_dir,
            raw_topic=raw_topic,
            ack_topic=ack_topic,
            group_id="e2e-stream",
        )
        stream_report = run_stream_job(config, until_idle=True, idle_timeout_s=3.0, max_runtime_s=400)
        upload_report = uploader.run_until_confirmed(timeout_s=60.0)
    return config, episodes, upload_report, stream_report


def test_every_episode_is_confirmed_and_visible_exactly_once(landed) -> None:
    config, episodes, upload_report, stream_report = landed
    ids = sorted(s.episode.episode_id for s in episodes)
    assert upload_report.pending == ()
    assert sorted(upload_report.committed) == ids
    table = DeltaTable(f"{config.lake_root}/episodes").to_pyarrow_table()
    assert sorted(table.column("episode_id").to_pylist()) == ids
    assert stream_report.episodes_committed == len(ids)
    assert stream_report.quarantined == 0


def test_catalog_indexes_every_episode(landed) -> None:
    from pi_catalog import Catalog

    config, episodes, _, _ = landed
    rows = Catalog(config.catalog_path).query_arrow(
        "SELECT episode_id, step_count FROM episodes ORDER BY episode_id"
    )
    expected = sorted((s.episode.episode_id, s.episode.step_count) for s in episodes)
    assert (
        list(zip(rows.column("episode_id").to_pylist(), rows.column("step_count").to_pylist(), strict=True))
        == expected
    )


def test_loader_returns_the_original_data(landed) -> None:
    from pi_loader import Dataset

    config, episodes, _, _ = landed
    by_id = {s.episode.episode_id: s for s in episodes}
    dataset = Dataset(
        config.lake_root,
        sql="SELECT episode_id FROM episodes",
        catalog=config.catalog_path,
        seed=3,
        action_horizon=ACTION_HORIZON,
    )
    assert len(dataset) == sum(s.episode.step_count for s in episodes)
    seen: set[tuple[str, int]] = set()
    psnrs = []
    for index in range(len(dataset)):
        sample = dataset[index]
        episode_id, step = str(sample["episode_id"]), int(sample["step"])  # type: ignore[call-overload]
        seen.add((episode_id, step))
        original = by_id[episode_id].episode
        state = np.asarray(sample["observation.state"])
        assert state.tobytes() == original.proprio[step].tobytes()
        actions = np.asarray(sample["action"])
        end = min(step + ACTION_HORIZON, original.step_count)
        assert actions[: end - step].tobytes() == original.action[step:end].tobytes()
        if index % 7 == 0:  # frames: a sample of steps and every camera
            for camera in original.camera_names:
                frame = np.asarray(sample[f"observation.images.{camera}"])
                ts = original.timestamps_ns[step]
                frame_ts = original.camera(camera).frame_timestamps_ns
                frame_index = max(int(np.searchsorted(frame_ts, ts, side="right")) - 1, 0)
                reference = _resized(
                    by_id[episode_id].frames[camera][frame_index], frame.shape[1], frame.shape[0]
                )
                psnrs.append(_psnr(frame, reference))
    assert len(seen) == len(dataset)
    assert min(psnrs) >= PSNR_MIN_DB, f"worst PSNR {min(psnrs):.1f} dB, mean {np.mean(psnrs):.1f}"


def test_uncommitted_attempts_are_not_visible(landed) -> None:
    config, episodes, _, _ = landed
    visible = read_visible(LakeLayout(config.lake_root), "steps", ["episode_id", "attempt_id"])
    for simulated in episodes:
        n = pc.sum(pc.equal(visible.column("episode_id"), simulated.episode.episode_id)).as_py()
        assert n == simulated.episode.step_count


def test_torch_dataloader_with_workers_reads_every_sample_once(landed) -> None:
    """The README's promise: `Dataset` is a map-style dataset for torch's DataLoader, here with
    two worker processes and batching; every sample arrives once, equal to the original."""
    import torch
    from pi_loader import Dataset

    config, episodes, _, _ = landed
    by_id = {s.episode.episode_id: s.episode for s in episodes}
    dataset = Dataset(
        config.lake_root,
        sql="SELECT episode_id FROM episodes",
        catalog=config.catalog_path,
        seed=3,
        action_horizon=ACTION_HORIZON,
    )
    # Dataset is map-style (__len__/__getitem__) without subclassing torch's, hence the Any.
    map_style: Any = dataset
    loader = torch.utils.data.DataLoader(map_style, batch_size=16, num_workers=2, shuffle=False)
    seen: list[tuple[str, int]] = []
    for batch in loader:
        states = batch["observation.state"]
        assert isinstance(states, torch.Tensor) and states.dtype == torch.float32
        steps = batch["step"].tolist()
        for row, (episode_id, step) in enumerate(zip(batch["episode_id"], steps, strict=True)):
            seen.append((str(episode_id), int(step)))
            assert states[row].numpy().tobytes() == by_id[str(episode_id)].proprio[step].tobytes()
        for camera in by_id[str(batch["episode_id"][0])].camera_names:
            assert batch[f"observation.images.{camera}"].shape[0] == states.shape[0]
    assert len(seen) == len(set(seen)) == len(dataset)
