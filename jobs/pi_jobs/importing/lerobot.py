"""`pilake import lerobot`: a LeRobot v3 dataset directory read into fleet episodes.

LeRobot v3 (lerobot >= 0.4, `codebase_version` "v3.0") packs many episodes per file:

    meta/info.json                          fps, features, robot_type, path templates
    meta/tasks.parquet                      task string -> task_index
    meta/episodes/chunk-*/file-*.parquet    one row per episode: length, tasks, where its rows
                                            and video segments are (data/{chunk,file}_index,
                                            videos/<key>/{chunk_index,file_index,from_timestamp,
                                            to_timestamp})
    data/chunk-*/file-*.parquet             one row per frame: observation.state, action,
                                            timestamp, frame_index, episode_index, index, task_index
    videos/<key>/chunk-*/file-*.mp4         each camera's frames, episodes one after another
                                            (AV1 by default, H.264 too; PyAV's dav1d decodes AV1)

Each episode becomes one fleet `Episode`: `observation.state` is the proprio and `action` the
action, both float32 exactly as stored; each video feature (`observation.images.<cam>`) becomes
camera `<cam>`, its segment decoded and handed to the stream job as the robots hand theirs
(H.264 in MP4); `image` features (PNG bytes in the parquet) likewise. The rate is the dataset's
`fps`. The per-frame `task_index` becomes instruction annotations, one per run of frames with
the same task, so a multi-task episode keeps its language per span. Episode ids are
`<directory name>-<sha256 of the meta files, 10 hex>-ep<episode_index>`: a rerun imports nothing
twice.
"""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pi_jobs.importing._episodes import (
    DatasetImportError,
    ImportedEpisode,
    SpanText,
    episode_id,
    make_episode,
    safe_name,
)

_IMAGES_PREFIX = "observation.images."


def _meta_digest(root: Path) -> str:
    digest = hashlib.sha256()
    files = [root / "meta" / "info.json", root / "meta" / "tasks.parquet"]
    files += sorted((root / "meta" / "episodes").rglob("*.parquet"))
    for path in files:
        if path.exists():
            digest.update(path.relative_to(root).as_posix().encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:10]


def read_info(root: Path) -> dict[str, Any]:
    """meta/info.json of a LeRobot v3 dataset; DatasetImportError saying what is wrong."""
    path = root / "meta" / "info.json"
    if not path.is_file():
        raise DatasetImportError(f"{root} is not a LeRobot dataset: no {path}")
    info: dict[str, Any] = json.loads(path.read_text())
    version = str(info.get("codebase_version", ""))
    if not version.startswith("v3"):
        raise DatasetImportError(
            f"{root} is LeRobot {version or 'of an unknown version'}, not v3.0; convert it first with "
            "lerobot's `python -m lerobot.datasets.v30.convert_dataset_v21_to_v30`"
        )
    return info


def read_tasks(root: Path) -> dict[int, str]:
    """task_index -> task string (meta/tasks.parquet: a pandas frame indexed by the task)."""
    table = pq.read_table(root / "meta" / "tasks.parquet")
    names = [
        c
        for c in table.column_names
        if c != "task_index"
        and (
            pa.types.is_string(table.schema.field(c).type)
            or pa.types.is_large_string(table.schema.field(c).type)
        )
    ]
    if "task_index" not in table.column_names or not names:
        raise DatasetImportError(
            f"{root}/meta/tasks.parquet has columns {table.column_names}; expected task_index and the task"
        )
    column = "task" if "task" in names else names[0]
    return dict(zip(table.column("task_index").to_pylist(), table.column(column).to_pylist(), strict=True))


def read_episodes_meta(root: Path) -> pa.Table:
    """Every row of meta/episodes, sorted by episode_index."""
    files = sorted((root / "meta" / "episodes").rglob("*.parquet"))
    if not files:
        raise DatasetImportError(f"{root} has no meta/episodes/chunk-*/file-*.parquet")
    table = pa.concat_tables([pq.read_table(f) for f in files], promote_options="default")
    return table.sort_by("episode_index")


def read_lerobot(
    root: Path,
    *,
    robot_type: str | None = None,
    robot_id: str | None = None,
    state_key: str = "observation.state",
    action_key: str = "action",
) -> Iterator[ImportedEpisode]:
    """The episodes of a LeRobot v3 dataset at `root`, in episode_index order, one at a time.

    Raises:
        DatasetImportError: not a v3 dataset, a feature or file missing, a video segment with
            another frame count than the episode's length (the message names the file).

    Example:
        >>> [e.episode.step_count for e in read_lerobot(Path("so100_pick"))][:3]
        [301, 287, 295]
    """
    root = Path(root)
    info = read_info(root)
    features: dict[str, Any] = info.get("features", {})
    for key in (state_key, action_key):
        if key not in features:
            raise DatasetImportError(f"{root}: no feature {key!r}; features are {sorted(features)}")
    fps = float(info["fps"])
    videos = sorted(k for k, f in features.items() if f.get("dtype") == "video")
    images = sorted(k for k, f in features.items() if f.get("dtype") == "image")
    tasks = read_tasks(root)
    meta = read_episodes_meta(root)
    digest = _meta_digest(root)
    kind = robot_type or info.get("robot_type") or "unknown"
    data_files: dict[str, pa.Table] = {}
    for row in meta.to_pylist():
        index = int(row["episode_index"])
        where = f"{root}#episode {index}"
        rows = _episode_rows(root, info, row, data_files, [state_key, action_key, *images])
        length = int(row["length"])
        if rows.num_rows != length:
            raise DatasetImportError(f"{where}: {rows.num_rows} data rows for length {length}")
        proprio = np.asarray(rows.column(state_key).to_pylist(), dtype=np.float32)
        action = np.asarray(rows.column(action_key).to_pylist(), dtype=np.float32)
        frames = {_camera(k): _decode_images(rows.column(k), where) for k in images}
        for key in videos:
            frames[_camera(key)] = _decode_segment(root, info, key, row, length, fps, where)
        task_ids = rows.column("task_index").to_pylist() if "task_index" in rows.column_names else []
        spans = _task_spans(task_ids, tasks)
        episode = make_episode(
            episode_id=episode_id(root.name, digest, f"ep{index:06d}"),
            robot_id=robot_id or f"lerobot-{safe_name(root.name)}",
            robot_type=str(kind),
            task=spans[0].value if spans else "",
            fps=fps,
            proprio=proprio,
            action=action,
            frames=frames,
            tags=("import:lerobot",),
            source=where,
        )
        yield ImportedEpisode(episode, source=f"lerobot:{where}", annotations=tuple(spans))


def _camera(key: str) -> str:
    return key[len(_IMAGES_PREFIX) :] if key.startswith(_IMAGES_PREFIX) else key


def _episode_rows(
    root: Path, info: dict[str, Any], row: dict[str, Any], cache: dict[str, pa.Table], columns: list[str]
) -> pa.Table:
    path = info["data_path"].format(chunk_index=row["data/chunk_index"], file_index=row["data/file_index"])
    if path not in cache:
        if not (root / path).is_file():
            raise DatasetImportError(f"{root}: episode {row['episode_index']}'s data file {path} is missing")
        cache.clear()  # episodes are in file order: one data file in memory at a time
        cache[path] = pq.read_table(root / path)
    table = cache[path]
    missing = [c for c in columns if c not in table.column_names]
    if missing:
        raise DatasetImportError(f"{root}/{path} lacks columns {missing}")
    mine = table.filter(pc.equal(table.column("episode_index"), row["episode_index"]))
    order = "frame_index" if "frame_index" in mine.column_names else "index"
    return mine.sort_by(order)


def _task_spans(task_ids: list[Any], tasks: dict[int, str]) -> list[SpanText]:
    spans: list[SpanText] = []
    start = 0
    for t in range(1, len(task_ids) + 1):
        if t == len(task_ids) or task_ids[t] != task_ids[start]:
            text = tasks.get(int(task_ids[start]))
            if text:
                spans.append(SpanText("instruction", str(text), start, t))
            start = t
    return spans


def _decode_images(column: pa.ChunkedArray, where: str) -> np.ndarray:
    from PIL import Image

    out = []
    for cell in column.to_pylist():
        data = cell.get("bytes") if isinstance(cell, dict) else None
        if not data:
            raise DatasetImportError(
                f"{where}: an image cell holds no bytes (a path-only image is not supported)"
            )
        out.append(np.asarray(Image.open(io.BytesIO(data)).convert("RGB")))
    return np.stack(out)


def _decode_segment(
    root: Path, info: dict[str, Any], key: str, row: dict[str, Any], length: int, fps: float, where: str
) -> np.ndarray:
    """The `length` frames of camera `key` from `from_timestamp` on, decoded from its file."""
    import av

    path = info["video_path"].format(
        video_key=key,
        chunk_index=row[f"videos/{key}/chunk_index"],
        file_index=row[f"videos/{key}/file_index"],
    )
    start = float(row[f"videos/{key}/from_timestamp"])
    frames: list[np.ndarray] = []
    try:
        with av.open(str(root / path)) as container:
            stream = container.streams.video[0]
            stream.thread_type = "AUTO"  # AV1 decodes faster threaded (ARCHITECTURE.md video notes)
            if start > 0 and stream.time_base is not None:
                container.seek(int(start / float(stream.time_base)), stream=stream, backward=True)
            for frame in container.decode(stream):
                if frame.time is not None and frame.time < start - 0.5 / fps:
                    continue
                frames.append(frame.to_ndarray(format="rgb24"))
                if len(frames) == length:
                    break
    except (av.FFmpegError, OSError) as err:
        raise DatasetImportError(f"{where}: cannot decode {root / path}: {err}") from err
    if len(frames) != length:
        raise DatasetImportError(
            f"{where}: {root / path} holds {len(frames)} frames from {start:.3f} s, the episode has {length}"
        )
    return np.stack(frames)
