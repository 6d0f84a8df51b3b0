"""`pilake dataset create | list | show | delete`: dataset pins (architecture decision 9).

A pin records the SQL that chose a dataset, its episodes and the exact rows it reads ((episode_id,
attempt_id) per episode), with a content hash (`pi_format.lake.pins`); `Dataset(lake,
snapshot=NAME)` reads exactly those rows, in the same order, after more data arrived, after
compaction, after GC with zero retention and after a backfill. GC keeps every row a live pin
names, so deleting a pin is what lets GC reclaim what only it held.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from pi_format import LakeLayout
from pi_format.lake import Pin, PinStore, content_hash, latest_commits, pinned_rows, read_deleted_ids
from pi_format.lake.pins import HASH_COLUMNS, check_pin_name

from pi_jobs.errors import PiJobsError


class DatasetError(PiJobsError):
    """A dataset pin cannot be made or read as asked."""


@dataclass(frozen=True, slots=True)
class DatasetCheck:
    """Whether a pin's rows are all still in the lake, unchanged."""

    pin: Pin
    rows_present: int
    content_hash_now: str | None  # None when rows are missing
    # pinned attempts whose stored bytes `pilake repair` found damaged (its quarantine rows of
    # reason `corrupt`): {episode_id, attempt_id, details (where, and what repair did)}
    damaged: tuple[dict[str, str], ...] = ()

    @property
    def intact(self) -> bool:
        return (
            self.rows_present == len(self.pin.episode_ids)
            and self.content_hash_now == self.pin.content_hash
            and not self.damaged
        )


def _episodes_rows(layout: LakeLayout, episode_ids: Sequence[str] | None) -> tuple[pa.Table, int]:
    """Every row (all attempts) of the episodes table's HASH_COLUMNS, of `episode_ids` (all when
    None), and the version read."""
    from deltalake import DeltaTable

    table = DeltaTable(layout.episodes)
    rows = table.to_pyarrow_table(columns=list(HASH_COLUMNS))
    if episode_ids is not None:
        rows = rows.filter(
            pc.is_in(rows.column("episode_id"), value_set=pa.array(list(episode_ids), pa.string()))
        )
    return rows, int(table.version())


def _versions(layout: LakeLayout) -> dict[str, int]:
    """The versions a pin is taken at; with the annotations table's (when the lake has one): the
    annotation versions the pin saw. A pinned read takes the annotations written at or before
    the pin's creation (`pi_format.lake.annotations`), so a later import changes nothing it reads.
    """
    from deltalake import DeltaTable
    from pi_format.lake import AnnotationStore

    names = ("episodes", "steps", "video")
    versions = {name: int(DeltaTable(layout.table(name)).version()) for name in names}
    annotations = AnnotationStore(layout).version()
    if annotations is not None:
        versions["annotations"] = annotations
    return versions


def create_dataset(
    layout: LakeLayout,
    name: str,
    *,
    sql: str | None = None,
    episode_ids: Sequence[str] | None = None,
    catalog: str | None = None,
) -> Pin:
    """Pin the visible attempts of the episodes `sql` selects over the catalog (or of
    `episode_ids`, or of every visible episode when both are None) under `name`.

    Raises:
        DatasetError: selected episodes the lake does not have visible (a stale catalog or
            deleted episodes), an empty selection, or a name taken by another pin.

    Example:
        >>> create_dataset(LakeLayout("/data/lake"), "pick-v3", sql="SELECT episode_id FROM episodes "
        ...                "WHERE task = 'pick' AND success", catalog="/data/catalog").content_hash[:8]
        '9b1f3c0a'
    """
    from pi_format.errors import LakeError

    check_pin_name(name)
    if sql is not None and episode_ids is not None:
        raise ValueError("pass sql or episode_ids, not both")
    ids: list[str] | None = None
    if sql is not None:
        if catalog is None:
            raise ValueError("a dataset chosen by SQL needs the catalog (PILAKE_CATALOG)")
        from pi_catalog import Catalog

        index = Catalog(catalog)
        try:
            ids = index.episode_ids(sql)
        finally:
            index.close()
    elif episode_ids is not None:
        ids = sorted(set(episode_ids))
    versions = _versions(layout)
    rows, version = _episodes_rows(layout, ids)
    visible = latest_commits(rows, read_deleted_ids(layout))
    if ids is not None:
        missing = sorted(set(ids) - set(visible.column("episode_id").to_pylist()))
        if missing:
            raise DatasetError(
                f"{len(missing)} selected episodes are not visible in {layout.root} (episodes version "
                f"{version}), e.g. {missing[:5]}: deleted, or the catalog is stale (`pilake catalog rebuild`)"
            )
    if visible.num_rows == 0:
        raise DatasetError(
            f"the selection has no episodes ({sql or 'every visible episode'}); nothing to pin"
        )
    pin = Pin(
        name=name,
        episode_ids=tuple(visible.column("episode_id").to_pylist()),
        attempt_ids=tuple(visible.column("attempt_id").to_pylist()),
        content_hash=content_hash(visible),
        table_versions=versions,
        sql=sql,
        lake_root=layout.root,
    )
    try:
        return PinStore(layout).create(pin)
    except LakeError as err:
        raise DatasetError(str(err)) from err


def check_dataset(layout: LakeLayout, name: str) -> DatasetCheck:
    """The pin `name` and whether every row it names is still in the lake with its content hash.

    Example:
        >>> check_dataset(LakeLayout("/data/lake"), "pick-v3").intact
        True
    """
    pin = get_dataset(layout, name)
    rows, _ = _episodes_rows(layout, pin.episode_ids)
    found = pinned_rows(rows, pin.episode_ids, pin.attempt_ids)
    present = found.num_rows
    return DatasetCheck(
        pin,
        present,
        content_hash(found) if present == len(pin.episode_ids) else None,
        damaged_attempts(layout, pin),
    )


def damaged_attempts(layout: LakeLayout, pin: Pin) -> tuple[dict[str, str], ...]:
    """The attempts `pin` names that `pilake repair` found damaged (architecture decision 10):
    its quarantine rows of reason `corrupt`, with their details (where the damage was, and the
    new attempt the episode was re-featurized as, or why it was kept aside).

    Example:
        >>> damaged_attempts(layout, PinStore(layout).get("pick-v3"))
        ({'episode_id': 'r1-000007', 'attempt_id': '5c0f...', 'details': 'damaged: steps ...'},)
    """
    from deltalake import DeltaTable
    from pi_format import QuarantineReason

    try:
        rows = DeltaTable(layout.quarantine).to_pyarrow_table(
            columns=["episode_id", "attempt_id", "reason", "details"]
        )
    except Exception:  # a lake without a quarantine table: nothing recorded
        return ()
    rows = rows.filter(pc.equal(rows.column("reason"), QuarantineReason.CORRUPT.value))
    pinned = set(zip(pin.episode_ids, pin.attempt_ids, strict=True))
    found = {}
    for row in rows.to_pylist():
        key = (str(row["episode_id"]), str(row["attempt_id"]))
        if key in pinned:
            found[key] = {"episode_id": key[0], "attempt_id": key[1], "details": str(row["details"])}
    return tuple(found[k] for k in sorted(found))


def get_dataset(layout: LakeLayout, name: str) -> Pin:
    """The pin `name` (DatasetError naming the pins there are when it does not exist)."""
    from pi_format.errors import LakeError

    try:
        return PinStore(layout).get(name)
    except LakeError as err:
        raise DatasetError(str(err)) from err


def delete_dataset(layout: LakeLayout, name: str) -> Pin:
    """Delete the pin `name`; the rows only it held become GC's to remove."""
    from pi_format.errors import LakeError

    try:
        return PinStore(layout).delete(name)
    except LakeError as err:
        raise DatasetError(str(err)) from err
