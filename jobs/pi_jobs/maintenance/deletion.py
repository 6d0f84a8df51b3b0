"""`pilake episodes delete`: take episodes out of the lake (bad data, a withdrawn consent).

A deletion is one row per episode in the lake's `deletions` table (append-only): from its commit
on, the visibility rule (`pi_format.lake.visibility`) leaves the episode out of every new
selection, whatever its attempts, and the catalog forgets it at once. Its bytes stay until the
next `pilake gc`, which removes every row of it (episodes, steps, video, raw) unless a dataset
pin holds the episode; then they stay until the pin is deleted, and GC says so. Per-episode rows
make this metadata plus a vacuum: no shared video file is decoded or re-encoded.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
from pi_format import LakeLayout
from pi_format.lake import DELETIONS_SCHEMA, PinStore, commit_actions, read_deleted_ids, write_file
from pi_format.lake.tables import ensure_lake_tables


@dataclass(slots=True)
class DeletionReport:
    """What `delete_episodes` did."""

    deletion_id: str
    deleted: list[str] = field(default_factory=list)
    already_deleted: list[str] = field(default_factory=list)
    not_in_lake: list[str] = field(default_factory=list)
    held_by_pins: dict[str, int] = field(default_factory=dict)  # pin -> episodes of this deletion
    catalog_forgotten: int = 0

    def lines(self) -> list[str]:
        out = [f"deleted {len(self.deleted)} episodes (deletion {self.deletion_id})"]
        if self.already_deleted:
            out.append(f"{len(self.already_deleted)} were deleted before: {self.already_deleted[:5]}")
        if self.not_in_lake:
            out.append(f"{len(self.not_in_lake)} are not in the lake: {self.not_in_lake[:5]}")
        out.append(f"catalog: forgot {self.catalog_forgotten} episodes; new selections leave them out now")
        for pin, count in sorted(self.held_by_pins.items()):
            out.append(
                f"dataset pin {pin!r} holds {count} of them: gc keeps their rows until the pin is deleted"
            )
        out.append("their bytes go at the next `pilake gc`")
        return out


def delete_episodes(
    layout: LakeLayout,
    episode_ids: Sequence[str],
    *,
    reason: str,
    selection: str,
    catalog: str | None = None,
) -> DeletionReport:
    """Delete `episode_ids` from every new selection (see the module docstring).

    Args:
        reason: the operator's words, kept with each deletion row ("consent withdrawn").
        selection: how the ids were chosen (the SQL), kept for the record.
        catalog: the catalog to forget them in at once (a later rebuild leaves them out anyway).

    Example:
        >>> delete_episodes(LakeLayout("/data/lake"), ["r1-000007"], reason="consent withdrawn",
        ...                 selection="ids").deleted
        ['r1-000007']
    """
    from deltalake import DeltaTable

    if isinstance(episode_ids, str):
        raise TypeError("episode_ids must be a sequence of ids, got a single str; wrap it in a list")
    if not reason.strip():
        raise ValueError("a deletion needs a reason (e.g. 'consent withdrawn'): it is kept with the rows")
    report = DeletionReport(deletion_id=uuid.uuid4().hex)
    wanted = sorted(set(str(e) for e in episode_ids))
    tables = ensure_lake_tables(layout)
    known = DeltaTable(layout.episodes).to_pyarrow_table(columns=["episode_id"]).column("episode_id")
    in_lake = set(pc.unique(known.combine_chunks()).to_pylist()) if len(known) else set()
    before = set(read_deleted_ids(layout).to_pylist())
    report.not_in_lake = [e for e in wanted if e not in in_lake]
    report.already_deleted = [e for e in wanted if e in in_lake and e in before]
    report.deleted = [e for e in wanted if e in in_lake and e not in before]
    if report.deleted:
        now = time.time_ns()
        n = len(report.deleted)
        rows = pa.table(
            {
                "episode_id": report.deleted,
                "deletion_id": [report.deletion_id] * n,
                "reason": [reason] * n,
                "selection": [selection] * n,
                "deleted_at_ns": pa.array([now] * n, pa.int64()),
            },
            schema=DELETIONS_SCHEMA,
        )
        written = write_file(layout.deletions, rows, [n], writer_id="delete", compression="zstd")
        commit_actions(tables["deletions"], "deletions", adds=[written], operation="delete")
    gone = set(report.deleted) | set(report.already_deleted)
    for pin in PinStore(layout).all_pins():
        held = sum(1 for e in pin.episode_ids if e in gone)
        if held:
            report.held_by_pins[pin.name] = held
    if catalog is not None and gone:
        from pi_catalog import Catalog

        index = Catalog(catalog)
        try:
            report.catalog_forgotten = index.forget_episodes(sorted(gone))
        finally:
            index.close()
    return report
