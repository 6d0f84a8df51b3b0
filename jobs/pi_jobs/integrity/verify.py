"""`pilake verify`: a scrub of the lake's stored bytes (architecture decision 10).

Every file the Delta logs name (or a `sample` of them) is read once and checked
(`_scan.check_file`): present with its logged size, every Parquet page's CRC, every video
chunk's `chunk_crc32`, every raw message's wire CRC. The scrub is read-only (it writes only its
own state and report, outside the lake), shows a progress bar with its rate, and is resumable:
after each file its result goes to a state file, and a run that finds one for the same lake and
selection skips the files already checked (the state is removed when a run completes).

The report names each damaged place and the episodes whose rows are there (episode_id and
attempt_id, whether that attempt is the visible one, which dataset pins name it), as text and as
JSON; `pilake repair` reads it.
"""

from __future__ import annotations

import json
import os
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pi_format import TABLE_SCHEMAS, LakeLayout

from pi_jobs.integrity._attribute import corrupt_episodes, read_markers
from pi_jobs.integrity._lost import log_gaps, vanished_episodes
from pi_jobs.integrity._parallel import check_files
from pi_jobs.integrity._scan import KIND_LOG, Fault, FileResult, check_file

# Every table of the lake is scrubbed by default: a byte of any of them may end up in a sample
# (steps, video, episodes), a repair (raw) or an operator's decision (the rest).
VERIFIED_TABLES = tuple(TABLE_SCHEMAS)
# The state file is rewritten at most this often (and after the last file): a killed run
# redoes at most this many seconds of checks.
_STATE_EVERY_S = 2.0


@dataclass(frozen=True, slots=True)
class VerifyConfig:
    """What a scrub checks and where it keeps its state and report.

    Args:
        sample: the fraction of files checked (1.0: every file); a file is in the sample when
            the CRC-32 of its path and `seed` falls below it, so a rerun with the same seed
            checks the same files and another seed others.
        seed: see `sample`.
        tables: the lake tables to check.
        state_path: where the scrub records each file's result as it goes (resume); None: not
            resumable.
        report_path: where the JSON report is written; None: not written.
        workers: files checked at once, each in its own process (`_parallel`); 1: in this one.

    Example:
        >>> VerifyConfig(sample=0.1, state_path=Path("/var/pilake/verify/state.json"))
    """

    sample: float = 1.0
    seed: int = 0
    tables: tuple[str, ...] = VERIFIED_TABLES
    state_path: Path | None = None
    report_path: Path | None = None
    # one process: what a small lake or a busy host wants; each worker costs ~1 s to start
    workers: int = 1

    def __post_init__(self) -> None:
        if isinstance(self.workers, bool) or not isinstance(self.workers, int) or self.workers < 1:
            raise ValueError(f"workers must be an int >= 1, got {self.workers!r}")
        if not 0.0 < self.sample <= 1.0:
            raise ValueError(f"sample must be a fraction in (0, 1], got {self.sample}")
        unknown = sorted(set(self.tables) - set(TABLE_SCHEMAS))
        if unknown or not self.tables:
            raise ValueError(f"tables must be among {sorted(TABLE_SCHEMAS)}, got {list(self.tables)}")

    def selects(self, table: str, path: str) -> bool:
        """Whether file `path` of `table` is in the sample."""
        if self.sample >= 1.0:
            return True
        return zlib.crc32(f"{self.seed}/{table}/{path}".encode()) / 2**32 < self.sample


@dataclass(slots=True)
class VerifyReport:
    """What a scrub found; `exit_code` is 2 when anything is damaged (the CLI's status).

    Example:
        >>> report = verify_lake(LakeLayout("/data/lake"))
        >>> report.exit_code, len(report.corrupt_episodes)
        (0, 0)
    """

    lake_root: str
    sample: float
    files_selected: int = 0
    files_checked: int = 0  # by this run (the others were resumed from the state file)
    files_resumed: int = 0
    bytes_checked: int = 0
    seconds: float = 0.0
    status: dict[str, dict[str, int]] = field(default_factory=dict)  # table -> status -> files
    faults: list[Fault] = field(default_factory=list)
    corrupt_episodes: list[dict[str, Any]] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return 2 if self.faults else 0

    @property
    def mb_per_s(self) -> float:
        return self.bytes_checked / 1e6 / self.seconds if self.seconds > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "lake_root": self.lake_root,
            "sample": self.sample,
            "files_selected": self.files_selected,
            "files_checked": self.files_checked,
            "files_resumed": self.files_resumed,
            "bytes_checked": self.bytes_checked,
            "seconds": round(self.seconds, 3),
            "mb_per_s": round(self.mb_per_s, 2),
            "status": self.status,
            "corrupt": bool(self.faults),
            "faults": [f.as_dict() for f in self.faults],
            "corrupt_episodes": self.corrupt_episodes,
        }

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> VerifyReport:
        return cls(
            lake_root=str(doc["lake_root"]),
            sample=float(doc.get("sample", 1.0)),
            files_selected=int(doc.get("files_selected", 0)),
            files_checked=int(doc.get("files_checked", 0)),
            files_resumed=int(doc.get("files_resumed", 0)),
            bytes_checked=int(doc.get("bytes_checked", 0)),
            seconds=float(doc.get("seconds", 0.0)),
            status={t: {k: int(v) for k, v in s.items()} for t, s in doc.get("status", {}).items()},
            faults=[Fault.from_dict(f) for f in doc.get("faults", [])],
            corrupt_episodes=list(doc.get("corrupt_episodes", [])),
        )

    def lines(self) -> list[str]:
        """The human summary `pilake verify` prints."""
        out = [
            f"verify: {self.files_selected} files ({self.sample:.0%} sample), {self.files_checked} checked "
            f"now, {self.files_resumed} resumed; {self.bytes_checked / 1e6:.1f} MB in {self.seconds:.1f} s "
            f"({self.mb_per_s:.1f} MB/s)"
        ]
        for table in sorted(self.status):
            counts = ", ".join(f"{n} {s}" for s, n in sorted(self.status[table].items()))
            out.append(f"  {table:<20} {counts}")
        for fault in self.faults:
            where = ", ".join(
                f"{k} {v}"
                for k, v in (
                    ("row group", fault.row_group),
                    ("column", fault.column),
                    ("page", fault.page),
                    ("row", fault.row),
                )
                if v is not None
            )
            out.append(f"  CORRUPT {fault.table}/{fault.file} ({where}): {fault.kind}: {fault.detail}")
        for ep in self.corrupt_episodes:
            flags = ["visible" if ep["visible"] else "not visible"]
            if ep["pins"]:
                flags.append("pinned by " + ", ".join(ep["pins"]))
            tables = sorted({p["table"] for p in ep["places"]})
            out.append(
                f"  corrupt episode {ep['episode_id']} attempt {ep['attempt_id']} ({'; '.join(flags)}) "
                f"in {', '.join(tables)}"
            )
        if self.faults:
            out.append(
                f"verify: {len(self.faults)} damaged places, {len(self.corrupt_episodes)} episodes: "
                "run `pilake repair` to re-featurize them from raw"
            )
        else:
            unverifiable = sum(s.get("unverifiable", 0) for s in self.status.values())
            note = f" ({unverifiable} files written before checksums: unverifiable)" if unverifiable else ""
            out.append(f"verify: no damage found{note}")
        return out


def _state_key(table: str, path: str) -> str:
    return f"{table}/{path}"


def _load_state(config: VerifyConfig, layout: LakeLayout) -> dict[str, dict[str, Any]]:
    if config.state_path is None or not config.state_path.exists():
        return {}
    try:
        doc = json.loads(config.state_path.read_text())
    except (OSError, ValueError):
        return {}
    same = (
        doc.get("lake_root") == layout.root
        and doc.get("sample") == config.sample
        and doc.get("seed") == config.seed
    )
    return dict(doc.get("files", {})) if same else {}


def _save_state(config: VerifyConfig, layout: LakeLayout, done: dict[str, dict[str, Any]]) -> None:
    if config.state_path is None:
        return
    config.state_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = config.state_path.with_suffix(".tmp")
    doc = {"lake_root": layout.root, "sample": config.sample, "seed": config.seed, "files": done}
    tmp.write_text(json.dumps(doc))
    os.replace(tmp, config.state_path)


def _table_files(layout: LakeLayout, table: str) -> tuple[dict[str, int] | None, Fault | None]:
    """path -> logged size of the table's current files; None when the lake has no such table."""
    files, _, fault = _table_state(layout, table)
    return files, fault


def _table_state(layout: LakeLayout, table: str) -> tuple[dict[str, int] | None, bool, Fault | None]:
    """The table's current files (path -> logged size; None when the lake has no such table or
    its log does not load), whether it records page CRCs in every file, and the fault of a log
    that does not load."""
    from deltalake import DeltaTable
    from pi_format.lake import checksums_required, table_filesystem
    from pi_format.lake._commit import file_sizes
    from pyarrow import fs as pafs

    fs, base = table_filesystem(layout.table(table))
    if fs.get_file_info(f"{base}/_delta_log").type == pafs.FileType.NotFound:
        return None, False, None  # a lake older than this table
    try:
        delta = DeltaTable(layout.table(table))
        return file_sizes(delta), checksums_required(delta.metadata().description), None
    except Exception as err:  # deltalake's errors: the log itself is damaged
        first = (str(err).strip().splitlines() or [""])[0]
        detail = f"the Delta log does not load: {first}"
        return None, False, Fault(KIND_LOG, table, "_delta_log", detail)


def _checks(
    layout: LakeLayout, to_check: list[tuple[str, str, int]], required: set[str], workers: int
) -> Iterator[FileResult]:
    """Each file's checks, in the order of `to_check`: here, or in `workers` processes."""
    from pi_format.lake import table_filesystem

    if workers > 1:
        yield from check_files(layout, to_check, required, workers=workers)
        return
    for table, path, size in to_check:
        fs, base = table_filesystem(layout.table(table))
        yield check_file(fs, base, table, path, size, require_crc=table in required)


def verify_lake(
    layout: LakeLayout,
    config: VerifyConfig | None = None,
    *,
    progress: bool = False,
    say: Callable[[str], None] | None = None,
) -> VerifyReport:
    """Scrub the lake (see the module docstring); read-only.

    Args:
        layout: the lake.
        config: what to check, the state and report files.
        progress: show a progress bar (bytes, rate, files, damage found) on stderr.
        say: where progress lines go when there is no bar (None: nowhere).

    Example:
        >>> report = verify_lake(LakeLayout("/data/lake"), VerifyConfig(sample=0.05))
        >>> print("\\n".join(report.lines()))
    """
    from tqdm import tqdm

    config = config or VerifyConfig()
    started = time.monotonic()
    report = VerifyReport(lake_root=layout.root, sample=config.sample)
    work: list[tuple[str, str, int]] = []
    required: set[str] = set()
    for table in config.tables:
        files, checksummed, log_fault = _table_state(layout, table)
        if checksummed:
            required.add(table)
        if log_fault is not None:
            report.faults.append(log_fault)
        for path, size in sorted((files or {}).items()):
            if config.selects(table, path):
                work.append((table, path, size))
    report.files_selected = len(work)
    done = _load_state(config, layout)
    done = {k: v for k, v in done.items() if k in {_state_key(t, p) for t, p, _ in work}}
    report.files_resumed = len(done)
    to_check = [(t, p, s) for t, p, s in work if _state_key(t, p) not in done]
    saved = time.monotonic()
    corrupt = sum(1 for v in done.values() if v["status"] == "corrupt")
    bar = tqdm(
        total=sum(s for _, _, s in to_check),
        unit="B",
        unit_scale=True,
        desc="verify",
        disable=not progress,
        postfix={"files": f"0/{len(to_check)}", "corrupt": corrupt},
    )
    checks = _checks(layout, to_check, required, config.workers)
    with bar:
        for n, ((table, path, size), result) in enumerate(zip(to_check, checks, strict=True), 1):
            done[_state_key(table, path)] = result.as_dict()
            report.files_checked += 1
            report.bytes_checked += result.bytes
            corrupt += result.status == "corrupt"
            bar.update(size)
            bar.set_postfix(files=f"{n}/{len(to_check)}", corrupt=corrupt)
            if time.monotonic() - saved >= _STATE_EVERY_S:
                _save_state(config, layout, done)
                saved = time.monotonic()
                if say is not None and not progress:
                    mb = report.bytes_checked / 1e6
                    say(f"verify: {n}/{len(to_check)} files, {mb:.1f} MB, {corrupt} corrupt")
    _save_state(config, layout, done)
    results = [FileResult.from_dict(done[_state_key(t, p)]) for t, p, _ in work]
    for r in results:
        report.status.setdefault(r.table, {}).setdefault(r.status, 0)
        report.status[r.table][r.status] += 1
        report.faults += r.faults
    # beyond the bytes: a commit missing from a log, an episode whose marker vanished
    for table in config.tables:
        report.faults += log_gaps(layout, table)
    markers = read_markers(layout, results)
    report.faults += vanished_episodes(layout, results, markers, report.faults)
    report.corrupt_episodes = corrupt_episodes(layout, report.faults, markers)
    report.seconds = time.monotonic() - started
    if config.report_path is not None:
        config.report_path.parent.mkdir(parents=True, exist_ok=True)
        config.report_path.write_text(json.dumps(report.as_dict(), indent=2) + "\n")
    if config.state_path is not None:  # complete: the next run starts over
        config.state_path.unlink(missing_ok=True)
    return report
