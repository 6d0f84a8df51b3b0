"""What checksums cost (architecture decision 10): the CRC of a page as pi_loader checks it, the
same steps pages decoded by pi_loader's page reader with and without their CRC checked, and the
scrub's rate.

    python -m benchmarks.integrity.run                 # 48 episodes, 3 repeats
    python -m benchmarks.integrity.run --quick         # 12 episodes (a minute)

A lake of `--episodes` simulated episodes (the stream job's featurizer, 96 px, two cameras) is
written by `LakeWriter` (every page with its CRC), and the same steps rows once more without
page CRCs (as a lake written before 2026-11-26). Legs, interleaved `--repeats` (>= 3) times
(`benchmarks._figures`):

* `crc_steps` / `crc_video`: zlib.crc32 of every stored page of the steps list columns / the
  video `data` column, as pi_loader checks it before decompressing or decoding: microseconds
  per page;
* `decode_checked` / `decode_unchecked`: every steps list column chunk decoded by pi_loader's
  own page reader (`decode_list_chunk`) from the file with CRCs and from the one without (the
  two alternating in ten slices of each repeat): microseconds per page, and their ratio repeat
  by repeat (the CRC's share of a page's cost);
* `scrub`: `pilake verify` of the whole lake (every page, every chunk, every raw message): MB/s.

Prints a table and writes OUT/integrity.json and OUT/integrity.png.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._figures import MIN_REPEATS, interleaved, ratio, spread

HERE = Path(__file__).resolve().parent


def build_lake(root: Path, episodes: int) -> Path:
    """`episodes` simulated episodes committed with their raw rows (one group commit)."""
    import pyarrow as pa
    from pi_format import RAW_SCHEMA, LakeLayout
    from pi_format.lake import LakeWriter
    from pi_format.wire import EpisodeAssembler, decode_chunk, encode_episode
    from pi_ingest.simulator import SimulationConfig, simulate_fleet
    from pi_jobs.stream.featurize import FeaturizeConfig, featurize

    cfg = SimulationConfig(
        robots=max(1, episodes // 4),
        episodes_per_robot=4,
        duration_s=2.0,
        camera_width=128,
        camera_height=128,
        cameras=("cam_high", "cam_wrist"),
        seed=5,
    )
    config = FeaturizeConfig(video_width=96, video_height=96)
    batch, raw = [], []
    for n, simulated in enumerate(simulate_fleet(cfg)):
        if n == episodes:
            break
        messages = encode_episode(simulated.episode)
        asm = EpisodeAssembler(simulated.episode.episode_id)
        for m in messages:
            asm.add(decode_chunk(m))
        attempt = f"bench-{n}"
        raw.append(
            pa.Table.from_pydict(
                {
                    "episode_id": [simulated.episode.episode_id] * len(messages),
                    "chunk_index": list(range(len(messages))),
                    "kafka_topic": ["t"] * len(messages),
                    "kafka_partition": [0] * len(messages),
                    "kafka_offset": list(range(len(messages))),
                    "received_at_ns": [time.time_ns()] * len(messages),
                    "attempt_id": [attempt] * len(messages),
                    "message": messages,
                },
                schema=RAW_SCHEMA,
            )
        )
        now = time.time_ns()
        batch.append(
            featurize(
                asm.assemble(),
                attempt_id=attempt,
                received_at_ns=now,
                raw_size_bytes=int(asm.size_bytes),
                committed_at_ns=now,
                config=config,
            )
        )
    LakeWriter(LakeLayout(str(root)), writer_id="bench").commit_episodes(batch, raw=pa.concat_tables(raw))
    return root


def pages(path: Path) -> list[tuple[str, int, int, int]]:
    """(column, header offset, body offset, body size) of every page of the file."""
    import pyarrow.parquet as pq
    from pi_format.lake._page_header import page_header
    from pi_format.lake.integrity import column_chunk_ranges

    raw = path.read_bytes()
    out = []
    for _, column, start, length in column_chunk_ranges(pq.ParquetFile(path).metadata):
        pos = start
        while pos < start + length:
            header = page_header(raw, pos)
            body = pos + header.header_bytes
            out.append((column, pos, body, header.compressed_size))
            pos = body + header.compressed_size
    return out


def list_chunks(path: Path) -> list[tuple[memoryview, int, int, int, int, np.dtype]]:
    """(column chunk bytes, codec, rows, width, max definition level, dtype) of every proprio
    and action column chunk of a steps file, as pi_loader's steps index records them."""
    import pyarrow.parquet as pq
    from pi_loader.reading._parquet_pages import CODECS

    raw = memoryview(path.read_bytes())
    parquet = pq.ParquetFile(path)
    metadata = parquet.metadata
    widths = {
        n: len(parquet.read_row_group(0, columns=[n]).column(0)[0].as_py()) for n in ("proprio", "action")
    }
    out = []
    for g in range(metadata.num_row_groups):
        group = metadata.row_group(g)
        for c in range(group.num_columns):
            column = group.column(c)
            name = column.path_in_schema.split(".")[0]
            if name not in widths:
                continue
            start, size = column.data_page_offset, column.total_compressed_size
            max_def = metadata.schema.column(c).max_definition_level
            out.append(
                (
                    raw[start : start + size],
                    CODECS[column.compression],
                    group.num_rows,
                    widths[name],
                    max_def,
                    np.dtype("<f4"),
                )
            )
    return out


def time_crc(raw: bytes, found: list[tuple[str, int, int, int]]) -> float:
    view = memoryview(raw)
    started = time.perf_counter()
    for _, _header, body, size in found:
        zlib.crc32(view[body : body + size])
    return (time.perf_counter() - started) / len(found) * 1e6


def time_decode(chunks: list[tuple[memoryview, int, int, int, int, np.dtype]], rounds: int) -> float:
    from pi_loader.reading._parquet_pages import decode_list_chunk

    started = time.perf_counter()
    for _ in range(rounds):
        for raw, codec, rows, width, max_def, dtype in chunks:
            out = decode_list_chunk(
                raw, codec=codec, rows=rows, width=width, max_definition=max_def, dtype=dtype
            )
            assert out is not None, "a steps chunk left to the row-group path: not what the loader decodes"
    return (time.perf_counter() - started) / (rounds * len(chunks)) * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=MIN_REPEATS)
    parser.add_argument("--quick", action="store_true", help="12 episodes")
    parser.add_argument("--out", type=Path, default=HERE.parent / "baselines")
    args = parser.parse_args(argv)
    if args.quick:
        args.episodes = min(args.episodes, 12)
    import pyarrow.parquet as pq
    from pi_format import LakeLayout
    from pi_jobs.integrity import VerifyConfig, verify_lake

    work = Path(tempfile.mkdtemp(prefix="pilake-integrity-"))
    try:
        print(f"integrity: building a lake of {args.episodes} episodes in {work} ...", flush=True)
        root = build_lake(work / "lake", args.episodes)
        (steps,) = sorted((root / "steps").glob("*.parquet"))
        (video,) = sorted((root / "video").glob("*.parquet"))
        unchecked = work / "steps-without-crc.parquet"  # the same rows, as an older lake wrote them
        table = pq.read_table(steps)
        metadata = pq.ParquetFile(steps).metadata
        # the writer's own settings (pi_format.lake.write_file), all but the page CRCs
        with pq.ParquetWriter(
            unchecked,
            table.schema,
            compression="zstd",
            use_dictionary=["episode_id", "attempt_id"],
            write_statistics=["episode_id", "attempt_id", "step_index"],
        ) as w:
            start = 0
            for g in range(metadata.num_row_groups):
                n = metadata.row_group(g).num_rows
                w.write_table(table.slice(start, n), row_group_size=n)
                start += n
        # the pages pi_loader's own page reader checks: the steps list columns, the video data
        lists = ("proprio", "action", "camera_frame_index")
        steps_pages = [p for p in pages(steps) if p[0].split(".")[0] in lists]
        video_pages = [p for p in pages(video) if p[0] == "data"]
        steps_raw, video_raw = steps.read_bytes(), video.read_bytes()
        checked_chunks, unchecked_chunks = list_chunks(steps), list_chunks(unchecked)
        rounds = max(1, 20000 // max(len(checked_chunks), 1))
        legs: dict[str, list[float]] = {
            k: [] for k in ("crc_steps", "crc_video", "decode_checked", "decode_unchecked", "scrub")
        }
        for repeat, leg in interleaved(["crc_steps", "crc_video", "decode", "scrub"], args.repeats):
            if leg == "crc_steps":
                legs[leg].append(time_crc(steps_raw, steps_pages))
            elif leg == "crc_video":
                legs[leg].append(time_crc(video_raw, video_pages))
            elif leg == "decode":
                # the two files alternate in 10 slices of the repeat: a ~2% difference stands
                # out of this shared machine's load only when both see the same moments of it
                with_crc = without_crc = 0.0
                for _ in range(10):
                    with_crc += time_decode(checked_chunks, max(1, rounds // 10)) / 10
                    without_crc += time_decode(unchecked_chunks, max(1, rounds // 10)) / 10
                legs["decode_checked"].append(with_crc)
                legs["decode_unchecked"].append(without_crc)
                leg = "decode_checked"
            else:
                report = verify_lake(LakeLayout(str(root)), VerifyConfig())
                assert report.exit_code == 0, report.lines()
                legs[leg].append(report.mb_per_s)
            print(f"  repeat {repeat}: {leg} = {legs[leg][-1]:.2f}", flush=True)
        figures = {
            "crc_us_per_steps_page": spread(legs["crc_steps"], what="crc steps page"),
            "crc_us_per_video_page": spread(legs["crc_video"], what="crc video page"),
            "decode_us_per_page_checked": spread(legs["decode_checked"], what="decode checked"),
            "decode_us_per_page_unchecked": spread(legs["decode_unchecked"], what="decode unchecked"),
            "decode_checked_over_unchecked": ratio(
                legs["decode_checked"], legs["decode_unchecked"], what="checked / unchecked"
            ),
            "scrub_mb_per_s": spread(legs["scrub"], what="scrub MB/s"),
        }
        sizes = {
            "steps_page_bytes_median": float(np.median([p[3] for p in steps_pages])),
            "video_page_bytes_median": float(np.median([p[3] for p in video_pages])),
            "steps_pages": len(steps_pages),
            "video_data_pages": len(video_pages),
            "lake_bytes": sum(p.stat().st_size for p in root.rglob("*.parquet")),
        }
        out: dict[str, Any] = {
            "benchmark": "integrity",
            "episodes": args.episodes,
            "repeats": args.repeats,
            "machine": {"python": sys.version.split()[0], "cores": _cores()},
            **sizes,
            **{k: v.to_json() for k, v in figures.items()},
        }
        print(f"\n{'figure':<32} median (min–max)")
        for k, v in figures.items():
            print(f"{k:<32} {v.text('{:.3g}')}")
        for name, size in sizes.items():
            print(f"{name:<32} {size}")
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "integrity.json").write_text(json.dumps(out, indent=2) + "\n")
        _plot(figures, args.out / "integrity.png")
        print(f"integrity: wrote {args.out / 'integrity.json'} and integrity.png")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def _cores() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _plot(figures: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [
        "crc_us_per_steps_page",
        "crc_us_per_video_page",
        "decode_us_per_page_unchecked",
        "decode_us_per_page_checked",
    ]
    labels = [
        "CRC of a steps page",
        "CRC of a video page",
        "decode a steps page\n(no CRC)",
        "decode a steps page\n(CRC checked)",
    ]
    medians = [figures[n].median for n in names]
    errors = [
        [figures[n].median - figures[n].low for n in names],
        [figures[n].high - figures[n].median for n in names],
    ]
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.bar(labels, medians, yerr=errors, capsize=4, color=["#4c72b0", "#4c72b0", "#999999", "#dd8452"])
    ax.set_ylabel("µs per page (median, min–max)")
    ratio_fig = figures["decode_checked_over_unchecked"]
    ax.set_title(
        f"Page checksums: decode with CRC / without = {ratio_fig.text('{:.3f}')}; "
        f"scrub {figures['scrub_mb_per_s'].text('{:.0f}')} MB/s",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
