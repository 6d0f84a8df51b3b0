"""Rebuilding one episode from the lake's `raw` table, as the stream job assembled it, and
featurizing it as a new attempt: what a backfill worker (`_function.BackfillFunction`) does per
episode and what `pilake repair` does for a damaged one (pi_jobs.integrity). No Flink here.

Raw rows are read with every Parquet page's CRC checked, and every message's wire CRC is checked
by `pi_format.wire.decode_chunk`: a rebuild never starts from damaged bytes (architecture
decision 10).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

RAW_COLUMNS = ["attempt_id", "chunk_index", "received_at_ns", "kafka_partition", "kafka_offset", "message"]


def assemble_raw(episode_id: str, rows: pa.Table) -> Any:
    """Assemble `episode_id` from one attempt's raw rows (RAW_SCHEMA columns `message`,
    `received_at_ns`, `kafka_partition`, `kafka_offset`), in arrival order, as the stream job did.

    Returns:
        (the pi_format.Episode, its distinct chunks' bytes).

    Raises:
        ProtocolError: chunks are missing.
    """
    from pi_format import ProtocolError, QuarantineReason
    from pi_format.wire import EpisodeAssembler, decode_chunk

    rows = rows.sort_by(
        [("received_at_ns", "ascending"), ("kafka_partition", "ascending"), ("kafka_offset", "ascending")]
    )
    asm = EpisodeAssembler(episode_id)
    for message in rows.column("message").to_pylist():
        # The stream job keeps, under the attempt's id, chunks its assembler rejected (a
        # conflicting re-send, a foreign key): skipping them in arrival order rebuilds what it
        # assembled. Identical duplicates are ignored by the assembler.
        try:
            asm.add(decode_chunk(message))
        except ProtocolError:
            continue
    if not asm.is_complete:
        have = len(asm.chunks)
        raise ProtocolError(
            QuarantineReason.COUNT_MISMATCH,
            f"raw holds {have} of {asm.chunk_count} chunks of {episode_id} for this attempt",
        )
    return asm.assemble(), int(asm.size_bytes)


def read_raw_rows(
    source_root: str,
    episode_id: str,
    files: Sequence[str],
    raw_dataset: Any = None,
    *,
    verify_pages: bool = True,
) -> pa.Table:
    """Every raw row of `episode_id` (all attempts), read from `files` (the raw files holding it,
    `_raw_files.raw_files_of`) with page CRCs checked; without files, filtered from
    `raw_dataset` (a pyarrow dataset of the whole table). `verify_pages=False` reads a file
    whose pages do not check (`pilake repair`): each message still proves itself by its wire
    CRCs when it is decoded (chunk payload CRC, header checks, the manifest's stream checksums).

    Raises:
        OSError: a page of those files does not match its CRC (pyarrow's message names it).
    """
    import pyarrow.dataset as pads
    from pi_format import LakeLayout
    from pi_format.lake import table_filesystem

    where = pc.field("episode_id") == episode_id
    if not files:
        if raw_dataset is None:
            raise ValueError(f"no raw files of episode {episode_id} given and no raw dataset to filter")
        return raw_dataset.to_table(columns=RAW_COLUMNS, filter=where)
    filesystem, base = table_filesystem(LakeLayout(source_root).raw)
    checked = pads.ParquetFileFormat(
        default_fragment_scan_options=pads.ParquetFragmentScanOptions(page_checksum_verification=verify_pages)
    )
    dataset = pads.dataset(
        [f"{base}/{f}" for f in files],
        format=checked,
        filesystem=filesystem,
        schema=raw_dataset.schema if raw_dataset is not None else None,
    )
    return dataset.to_table(columns=RAW_COLUMNS, filter=where)


def rebuild_episode(
    episode_id: str,
    attempt_id: str,
    rows: pa.Table,
    *,
    featurize_config: Any,
    featurizer_tag: str | None,
) -> Any:
    """The new attempt's `EpisodeRows` of `episode_id`, rebuilt from its raw `rows` (all
    attempts; `read_raw_rows`): the attempt `attempt_id`'s rows first; an attempt without rows
    of its own (a quarantine release rebuilt it from other attempts') falls back to the other
    attempts, newest first, the first that assembles. The marker carries `featurizer_tag`.

    Raises:
        ValueError: no raw rows; ProtocolError: no attempt assembles.
    """
    from pi_format import ProtocolError

    if rows.num_rows == 0:
        raise ValueError(f"the raw table holds no rows of episode {episode_id}")
    attempts = [attempt_id] + [
        a
        for a in rows.sort_by([("received_at_ns", "descending")]).column("attempt_id").unique().to_pylist()
        if a != attempt_id
    ]
    error: Exception | None = None
    for attempt in attempts:
        mine = rows.filter(pc.equal(rows.column("attempt_id"), attempt))
        if mine.num_rows == 0:
            continue
        try:
            episode, raw_size = assemble_raw(episode_id, mine)
        except ProtocolError as err:
            error = error or err
            continue
        received = int(pc.max(mine.column("received_at_ns")).as_py())
        return featurize_new_attempt(episode, received, raw_size, featurize_config, featurizer_tag)
    raise error or ValueError(f"no raw attempt of {episode_id} assembles")


def featurize_new_attempt(
    episode: Any, received_at_ns: int, raw_size: int, config: Any, featurizer_tag: str | None
) -> Any:
    """Featurize `episode` as a new attempt (a fresh attempt id) marked with `featurizer_tag`."""
    from pi_format.lake import EpisodeRows

    from pi_jobs.stream.featurize import featurize

    rows = featurize(
        episode,
        attempt_id=str(uuid.uuid4()),
        received_at_ns=received_at_ns,
        raw_size_bytes=raw_size,
        committed_at_ns=time.time_ns(),
        config=config,
    )
    marker = rows.episode
    index = marker.schema.get_field_index("featurizer")
    marker = marker.set_column(index, marker.schema.field(index), pa.array([featurizer_tag], pa.string()))
    return EpisodeRows(episode=marker, steps=rows.steps, video=rows.video)
