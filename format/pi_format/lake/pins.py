"""Dataset pins: a named, immutable set of the exact episodes rows a dataset reads (SPEC.md §7.9,
architecture decisions 6 and 9).

A pin names rows, not files or versions: (episode_id, attempt_id) per episode, plus the SQL that
chose them, the table versions it was taken at (informational) and a content hash of the rows'
identity and shape. Compaction and GC may rewrite and delete files freely as long as those rows
stay readable (`pinned_rows` finds them in whatever files hold them now), and GC keeps every row
a live pin names; a pin does not rely on Delta time travel, whose log entries expire.

Pins live in the lake's own `pins` Delta table, one data file per pin (delete = remove that
file), so the lake stays the source of truth and a catalog rebuild loses none.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from pi_format.errors import LakeError
from pi_format.lake._commit import commit_actions
from pi_format.lake._files import table_filesystem, write_file
from pi_format.lake.layout import LakeLayout
from pi_format.lake.schemas import PINS_SCHEMA
from pi_format.lake.tables import ensure_lake_tables

# The episodes columns a pin's content hash covers: the identity of each row and the shape of
# what a sample is cut from. An attempt's rows never change once committed, so equal hashes mean
# the pinned samples are the same bytes.
HASH_COLUMNS = (
    "episode_id",
    "attempt_id",
    "committed_at_ns",
    "step_count",
    "proprio_dim",
    "action_dim",
    "cameras",
    "video_width",
    "video_height",
    "video_chunk_frames",
)
_NAME_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")


def pin_app_id(name: str) -> str:
    """The Delta application id two concurrent creations of the same pin name conflict on."""
    return f"pilake-pin-{name}"


def check_pin_name(name: str) -> str:
    """`name`, or a ValueError saying what a pin name may hold."""
    if not isinstance(name, str) or not name or len(name) > 128 or not set(name) <= _NAME_CHARS:
        raise ValueError(f"a pin name is 1-128 characters of letters, digits, '-', '_' and '.', got {name!r}")
    return name


def content_hash(rows: pa.Table) -> str:
    """sha256 (hex) of `rows`' HASH_COLUMNS in (episode_id, attempt_id) order: what a pin reads.

    Example:
        >>> content_hash(pinned_rows(episodes, ids, attempts))[:12]
        '9b1f3c0a7d2e'
    """
    missing = [c for c in HASH_COLUMNS if c not in rows.column_names]
    if missing:
        raise ValueError(f"a pin's content hash needs episodes columns {missing}")
    ordered = rows.select(list(HASH_COLUMNS)).sort_by(
        [("episode_id", "ascending"), ("attempt_id", "ascending")]
    )
    digest = hashlib.sha256()
    for batch in ordered.to_batches(max_chunksize=4096):
        for row in batch.to_pylist():
            digest.update(json.dumps([row[c] for c in HASH_COLUMNS], separators=(",", ":")).encode())
            digest.update(b"\n")
    return digest.hexdigest()


@dataclass(frozen=True, slots=True)
class Pin:
    """One dataset pin: the exact rows a named dataset reads.

    Example:
        >>> pin = PinStore(LakeLayout("/data/lake")).get("pick-v3")
        >>> len(pin.episode_ids), pin.content_hash[:8]
        (1200, '9b1f3c0a')
    """

    name: str
    episode_ids: tuple[str, ...]
    attempt_ids: tuple[str, ...]
    content_hash: str
    table_versions: Mapping[str, int]
    sql: str | None = None
    lake_root: str = ""
    created_at_ns: int = field(default_factory=time.time_ns)

    def __post_init__(self) -> None:
        check_pin_name(self.name)
        if len(self.episode_ids) != len(self.attempt_ids):
            raise ValueError(
                f"pin {self.name!r}: {len(self.episode_ids)} episode ids but "
                f"{len(self.attempt_ids)} attempt ids"
            )
        if list(self.episode_ids) != sorted(set(self.episode_ids)):
            raise ValueError(f"pin {self.name!r}: episode ids must be sorted and unique")

    @property
    def pairs(self) -> dict[str, str]:
        return dict(zip(self.episode_ids, self.attempt_ids, strict=True))

    def to_row(self) -> pa.Table:
        return pa.table(
            {
                "name": [self.name],
                "created_at_ns": pa.array([self.created_at_ns], pa.int64()),
                "sql": pa.array([self.sql], pa.string()),
                "lake_root": [self.lake_root],
                "table_versions": [json.dumps(dict(self.table_versions), sort_keys=True)],
                "episode_count": pa.array([len(self.episode_ids)], pa.int64()),
                "episode_ids": pa.array([list(self.episode_ids)], pa.list_(pa.string())),
                "attempt_ids": pa.array([list(self.attempt_ids)], pa.list_(pa.string())),
                "content_hash": [self.content_hash],
            },
            schema=PINS_SCHEMA,
        )

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Pin:
        return cls(
            name=str(row["name"]),
            episode_ids=tuple(row["episode_ids"]),
            attempt_ids=tuple(row["attempt_ids"]),
            content_hash=str(row["content_hash"]),
            table_versions={str(k): int(v) for k, v in json.loads(row["table_versions"]).items()},
            sql=row["sql"],
            lake_root=str(row["lake_root"]),
            created_at_ns=int(row["created_at_ns"]),
        )


@dataclass(frozen=True, slots=True)
class PinSummary:
    """What `PinStore.list` says of a pin without its id lists."""

    name: str
    episode_count: int
    content_hash: str
    sql: str | None
    created_at_ns: int
    path: str  # its data file in the pins table


class PinStore:
    """The lake's dataset pins (the `pins` Delta table).

    Example:
        >>> store = PinStore(LakeLayout("/data/lake"))
        >>> store.create(pin)
        >>> [p.name for p in store.summaries()]
        ['pick-v3']
        >>> store.delete("pick-v3").episode_ids[:1]
        ('r1-000001',)
    """

    def __init__(self, layout: LakeLayout) -> None:
        self.layout = layout
        self._table: Any = None  # opened on first use; created only by a write

    def _open(self, *, create: bool) -> Any:
        """The pins table (None when reading a lake that has none yet: readers create nothing)."""
        from deltalake import DeltaTable

        if self._table is None:
            if create:
                self._table = ensure_lake_tables(self.layout)["pins"]
            else:
                try:
                    self._table = DeltaTable(self.layout.pins)
                except Exception:  # deltalake's TableNotFoundError: a lake without pins
                    return None
        return self._table

    def _files(self) -> list[str]:
        table = self._open(create=False)
        if table is None:
            return []
        table.update_incremental()
        return sorted(pa.table(table.get_add_actions(flatten=True)).column("path").to_pylist())

    def _read(
        self, paths: Sequence[str], columns: list[str] | None = None
    ) -> list[tuple[str, dict[str, Any]]]:
        import pyarrow.parquet as pq

        fs, base = table_filesystem(self.layout.pins)
        out = []
        for path in paths:
            try:
                table = pq.read_table(f"{base}/{path}", columns=columns, filesystem=fs)
            except FileNotFoundError as err:
                raise LakeError(
                    f"pin file {path} of {self.layout.pins} is listed in the table but gone: {err}"
                ) from err
            for row in table.to_pylist():
                out.append((path, row))
        return out

    def summaries(self) -> list[PinSummary]:
        """Every live pin, by name (its scalar columns only: no id list is read)."""
        columns = ["name", "created_at_ns", "sql", "content_hash", "episode_count"]
        out = [
            PinSummary(
                name=row["name"],
                episode_count=int(row["episode_count"]),
                content_hash=row["content_hash"],
                sql=row["sql"],
                created_at_ns=int(row["created_at_ns"]),
                path=path,
            )
            for path, row in self._read(self._files(), columns)
        ]
        return sorted(out, key=lambda p: p.name)

    def _find(self, name: str) -> tuple[str, Pin] | None:
        for path, row in self._read(self._files(), ["name"]):
            if row["name"] == name:
                (path, row), *_ = self._read([path])
                return path, Pin.from_row(row)
        return None

    def find(self, name: str) -> Pin | None:
        """The pin named `name`, or None (reads one small column of each pin's file to find it).

        Example:
            >>> PinStore(LakeLayout("/data/lake")).find("pick-v3") is None
            False
        """
        found = self._find(check_pin_name(name))
        return None if found is None else found[1]

    def get(self, name: str) -> Pin:
        """The pin named `name`.

        Raises:
            LakeError: no live pin has that name (the message lists those there are).
        """
        found = self._find(check_pin_name(name))
        if found is None:
            names = [p.name for p in self.summaries()]
            raise LakeError(
                f"no dataset pin named {name!r} in {self.layout.root}; pins: "
                f"{names[:20]}{' ...' if len(names) > 20 else ''} (`pilake dataset list`)"
            )
        return found[1]

    def all_pins(self) -> list[Pin]:
        """Every live pin with its rows (GC reads them to keep what they need)."""
        return [Pin.from_row(row) for _, row in self._read(self._files())]

    def create(self, pin: Pin) -> Pin:
        """Store `pin`. Names are immutable: the same pin again is a no-op; another pin under a
        taken name raises LakeError. Two concurrent creations of one name: one wins, the other
        raises (Delta's conflict check on the name's application transaction).
        """
        from deltalake.exceptions import CommitFailedError

        existing = self._find(pin.name)
        if existing is not None:
            if existing[1].pairs == pin.pairs and existing[1].content_hash == pin.content_hash:
                return existing[1]
            raise LakeError(
                f"a dataset pin named {pin.name!r} already exists with other rows "
                f"({len(existing[1].episode_ids)} episodes, hash {existing[1].content_hash[:12]}); "
                "pins are immutable: pick a new name (e.g. a version suffix) or delete the old one first"
            )
        written = write_file(
            self.layout.pins, pin.to_row(), [1], writer_id=f"pin-{pin.name}", compression="zstd"
        )
        try:
            commit_actions(
                self._open(create=True),
                "pins",
                adds=[written],
                app_versions={pin_app_id(pin.name): time.time_ns() // 1000},
                operation="pin",
            )
        except CommitFailedError as err:
            raise LakeError(
                f"dataset pin {pin.name!r} was created concurrently by another process: {err}"
            ) from err
        return pin

    def delete(self, name: str) -> Pin:
        """Remove the pin `name` (its rows become GC-able unless another pin names them).

        Raises:
            LakeError: no such pin.
        """
        found = self._find(check_pin_name(name))
        if found is None:
            self.get(name)  # raises with the list of names
            raise AssertionError("unreachable")
        path, pin = found
        commit_actions(
            self._open(create=True),
            "pins",
            removes=[(path, None)],
            app_versions={pin_app_id(name): time.time_ns() // 1000},
            operation="unpin",
        )
        return pin
