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
    ImportOptions,
    SpanText,
    episode_id,
    make_episode,
    safe_name,
)
from pi_jobs.importing._lerobot_checks import (
    check_features,
    check_frame_shape,
    check_rate,
    check_totals,
    vectors,
)

_IMAGES_PREFIX = "observation.images."


def _read_parquet(path: Path, what: str, options: ImportOptions | None = None) -> pa.Table:
    """A parquet file, its declared size checked first; DatasetImportError naming the file."""
    if not path.is_file():
        raise DatasetImportError(f"{what} {path} is missing: restore it from the dataset's source")
    try:
        if options is not None:
            meta = pq.ParquetFile(path).metadata
            declared = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
            options.check_bytes(f"{what} {path}", declared, f"{meta.num_rows} rows")
        return pq.read_table(path)
    except (OSError, pa.ArrowException, ValueError) as err:
        raise DatasetImportError(
            f"{what} {path} cannot be read ({type(err).__name__}: {err}): it is damaged or truncated; "
            "restore it from the dataset's source"
        ) from err


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
    try:
        info: dict[str, Any] = json.loads(path.read_text())
        if not isinstance(info, dict):
            raise ValueError(f"a JSON object was expected, got {type(info).__name__}")
    except (ValueError, UnicodeDecodeError) as err:
        raise DatasetImportError(f"{path} is not valid JSON ({err}): restore it") from err
    fps = info.get("fps")
    if isinstance(fps, bool) or not isinstance(fps, int | float) or not (0 < fps < 1e6):
        raise DatasetImportError(f"{path}: fps must be a number > 0, got {fps!r}")
    for key in ("data_path", "features"):
        if key not in info:
            raise DatasetImportError(f"{path} has no {key!r}: not a LeRobot v3 info.json")
    version = str(info.get("codebase_version", ""))
    if not version.startswith("v3"):
        raise DatasetImportError(
            f"{root} is LeRobot {version or 'of an unknown version'}, not v3.0; convert it first with "
            "lerobot's `python -m lerobot.datasets.v30.convert_dataset_v21_to_v30`"
        )
    return info


def read_tasks(root: Path) -> dict[int, str]:
    """task_index -> task string (meta/tasks.parquet: a pandas frame indexed by the task)."""
    table = _read_parquet(root / "meta" / "tasks.parquet", "the tasks file")
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
    table = pa.concat_tables(
        [_read_parquet(f, "the episodes metadata file") for f in files], promote_options="default"
    )
    missing = [
        c
        for c in ("episode_index", "length", "data/chunk_index", "data/file_index")
        if c not in table.column_names
    ]
    if missing:
        raise DatasetImportError(f"{root}/meta/episodes lacks columns {missing}: not LeRobot v3 metadata")
    return table.sort_by("episode_index")


def read_lerobot(
    root: Path,
    *,
    robot_type: str | None = None,
    robot_id: str | None = None,
    state_key: str = "observation.state",
    action_key: str = "action",
    options: ImportOptions | None = None,
) -> Iterator[ImportedEpisode]:
    """The episodes of a LeRobot v3 dataset at `root`, in episode_index order, one at a time.

    info.json is checked against the data, never believed: a feature's shape against the
    arrays, `fps` against the timestamps, `total_episodes`/`total_frames` against the metadata,
    each episode's `length` against its rows and video frames, a camera's declared size against
    its decoded frames. A disagreement is refused with both values named. A feature the lake has
    no column for is refused unless `options.drop_features` names it.

    Raises:
        DatasetImportError: not a v3 dataset, a feature or file missing or damaged, info.json
            disagreeing with the data, an unknown feature (the message names the file and fix).

    Example:
        >>> [e.episode.step_count for e in read_lerobot(Path("so100_pick"))][:3]
        [301, 287, 295]
    """
    root = Path(root)
    options = options or ImportOptions()
    info = read_info(root)
    features: dict[str, Any] = info["features"]
    for key in (state_key, action_key):
        if key not in features:
            raise DatasetImportError(f"{root}: no feature {key!r}; features are {sorted(features)}")
    fps = float(info["fps"])
    videos = sorted(k for k, f in features.items() if f.get("dtype") == "video")
    images = sorted(k for k, f in features.items() if f.get("dtype") == "image")
    check_features(root, features, {state_key, action_key, *videos, *images}, options)
    tasks = read_tasks(root)
    meta = read_episodes_meta(root)
    check_totals(root, info, meta)
    digest = _meta_digest(root)
    kind = robot_type or info.get("robot_type") or "unknown"
    data_files: dict[str, pa.Table] = {}
    for row in meta.to_pylist():
        index = int(row["episode_index"])
        where = f"{root}#episode {index}"
        rows, path = _episode_rows(root, info, row, data_files, [state_key, action_key, *images], options)
        length = int(row["length"])
        if rows.num_rows != length:
            raise DatasetImportError(
                f"{where}: meta/episodes says length {length}, {path} holds {rows.num_rows} rows of it"
            )
        proprio = vectors(rows, state_key, features, path, where)
        action = vectors(rows, action_key, features, path, where)
        check_rate(rows, fps, path, where)
        frames = {_camera(k): _decode_images(rows.column(k), where) for k in images}
        for key in videos:
            frames[_camera(key)] = _decode_segment(root, info, key, row, length, fps, where, options)
        for key in (*images, *videos):
            check_frame_shape(features[key], frames[_camera(key)], key, where)
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
            options=options,
        )
        yield ImportedEpisode(episode, source=f"lerobot:{where}", annotations=tuple(spans))


def _camera(key: str) -> str:
    return key[len(_IMAGES_PREFIX) :] if key.startswith(_IMAGES_PREFIX) else key


def _episode_rows(
    root: Path,
    info: dict[str, Any],
    row: dict[str, Any],
    cache: dict[str, pa.Table],
    columns: list[str],
    options: ImportOptions,
) -> tuple[pa.Table, str]:
    path = info["data_path"].format(chunk_index=row["data/chunk_index"], file_index=row["data/file_index"])
    if path not in cache:
        cache.clear()  # episodes are in file order: one data file in memory at a time
        cache[path] = _read_parquet(root / path, f"episode {row['episode_index']}'s data file", options)
    table = cache[path]
    missing = [c for c in [*columns, "episode_index"] if c not in table.column_names]
    if missing:
        raise DatasetImportError(f"{root}/{path} lacks columns {missing}")
    mine = table.filter(pc.equal(table.column("episode_index"), row["episode_index"]))
    order = "frame_index" if "frame_index" in mine.column_names else "index"
    return (mine.sort_by(order) if order in mine.column_names else mine), path


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
        try:
            out.append(np.asarray(Image.open(io.BytesIO(data)).convert("RGB")))
        except (OSError, ValueError, Image.DecompressionBombError) as err:
            raise DatasetImportError(f"{where}: an image cell cannot be decoded: {err}") from err
    try:
        return np.stack(out)
    except ValueError as err:
        raise DatasetImportError(f"{where}: the images of one camera differ in size: {err}") from err


def _decode_segment(
    root: Path,
    info: dict[str, Any],
    key: str,
    row: dict[str, Any],
    length: int,
    fps: float,
    where: str,
    options: ImportOptions,
) -> np.ndarray:
    """The `length` frames of camera `key` from `from_timestamp` on, decoded from its file."""
    import av

    path = info["video_path"].format(
        video_key=key,
        chunk_index=row[f"videos/{key}/chunk_index"],
        file_index=row[f"videos/{key}/file_index"],
    )
    start = float(row[f"videos/{key}/from_timestamp"])
    if not (root / path).is_file():
        raise DatasetImportError(
            f"{where}: camera {key}'s video file {root / path} is missing: restore it from the "
            "dataset's source"
        )
    frames: list[np.ndarray] = []
    try:
        with av.open(str(root / path)) as container:
            if not container.streams.video:
                raise DatasetImportError(f"{where}: {root / path} holds no video stream")
            stream = container.streams.video[0]
            width, height = stream.codec_context.width, stream.codec_context.height
            options.check_bytes(
                f"{where}: {root / path}", width * height * 3 * length, (length, height, width, 3)
            )
            stream.thread_type = "AUTO"  # AV1 decodes faster threaded (ARCHITECTURE.md video notes)
            if start > 0 and stream.time_base is not None:
                container.seek(int(start / float(stream.time_base)), stream=stream, backward=True)
            for frame in container.decode(stream):
                if frame.time is not None and frame.time < start - 0.5 / fps:
                    continue
                frames.append(frame.to_ndarray(format="rgb24"))
                if len(frames) == length:
                    break
    except (av.FFmpegError, OSError, ValueError) as err:
        raise DatasetImportError(
            f"{where}: cannot decode {root / path}: {err}; the file is damaged: restore it"
        ) from err
    if len(frames) != length:
        raise DatasetImportError(
            f"{where}: {root / path} holds {len(frames)} frames from {start:.3f} s, the episode has "
            f"{length}: the video is truncated or meta/episodes is wrong; restore it"
        )
    return np.stack(frames)
