"""Named dataset snapshots in the catalog (`dataset_snapshots`): the part of `Catalog` that
stores and reads them, kept apart from the episode index. Snapshots saved here are names for
`pi_loader.Snapshot` JSON; unlike the lake's dataset pins (`pilake dataset`, pi_format.lake.pins)
GC does not keep their rows.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from pi_catalog._errors import CatalogQueryError, PiCatalogError
from pi_catalog._schema import SNAPSHOTS_TABLE


class SnapshotsMixin:
    """`Catalog`'s dataset-snapshot methods (`Catalog` provides the session and the schema)."""

    if TYPE_CHECKING:
        location: str

        def _session(self) -> contextlib.AbstractContextManager[Any]: ...

        def _ensure(self, session: Any) -> None: ...

        @staticmethod
        def _command(client: Any, sql: str) -> None: ...

    def _ensure_snapshots(self, session: Any) -> None:
        self._ensure(session)
        # The full snapshot (episode ids and attempts) as JSON; catalogs made before it existed
        # gain the column here. sql and table_versions stay as columns for queries.
        ddl = f"ALTER TABLE {SNAPSHOTS_TABLE} ADD COLUMN IF NOT EXISTS snapshot String"
        if ddl not in session.ensured:
            self._command(session.client, ddl)
            session.ensured.add(ddl)

    def save_snapshot(
        self, name: str, snapshot_json: str, *, sql: str, table_versions: Mapping[str, int]
    ) -> None:
        """Store a dataset snapshot (a pi_loader.Snapshot as JSON) under `name`.

        Names are immutable: storing the same JSON again is a no-op; different JSON under a taken
        name raises, so a training run's named dataset can never change under it.

        Raises:
            ValueError: empty name.
            PiCatalogError: the name is taken by a different snapshot.

        Example:
            >>> catalog.save_snapshot("pick-v3", snap.to_json(), sql=snap.sql or "",
            ...                       table_versions=snap.table_versions)
        """
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"snapshot name must be a non-empty string, got {name!r}")
        with self._session() as session:
            self._ensure_snapshots(session)
            existing = self._snapshot_rows(session.client, name)
            if existing:
                if existing[0] == snapshot_json:
                    return
                raise PiCatalogError(
                    f"snapshot name {name!r} is taken by a different snapshot; names are immutable, "
                    "pick a new name (e.g. with a version suffix)"
                )
            row = pa.table(
                {
                    "name": pa.array([name]),
                    "created_at": pa.array([time.time_ns() // 1_000_000], pa.int64()).cast(
                        pa.timestamp("ms", tz="UTC")
                    ),
                    "sql": pa.array([sql]),
                    "table_versions": pa.array([json.dumps(dict(table_versions), sort_keys=True)]),
                    "snapshot": pa.array([snapshot_json]),
                }
            )
            try:
                session.client.insert_arrow(SNAPSHOTS_TABLE, row)
            except Exception as err:
                raise CatalogQueryError(str(err), f"INSERT INTO {SNAPSHOTS_TABLE} (name={name!r})") from err

    def _snapshot_rows(self, client: Any, name: str) -> list[str]:
        sql = f"SELECT snapshot FROM {SNAPSHOTS_TABLE} WHERE name = {{name:String}} ORDER BY created_at"
        try:
            table = client.query_arrow(sql, parameters={"name": name})
        except Exception as err:
            raise CatalogQueryError(str(err), sql) from err
        return [v.decode() if isinstance(v, bytes) else str(v) for v in table.column("snapshot").to_pylist()]

    def snapshot_json(self, name: str) -> str:
        """The JSON stored under snapshot `name`.

        Raises:
            PiCatalogError: no snapshot has that name (the message lists the names there are).

        Example:
            >>> Snapshot.from_json(catalog.snapshot_json("pick-v3"))
        """
        with self._session() as session:
            self._ensure_snapshots(session)
            rows = self._snapshot_rows(session.client, name)
            if not rows:
                names = self._snapshot_names(session.client)
                raise PiCatalogError(
                    f"no dataset snapshot named {name!r} in the catalog at {self.location}; "
                    f"it has {names[:20]}{' ...' if len(names) > 20 else ''}"
                )
        return rows[0]

    def _snapshot_names(self, client: Any) -> list[str]:
        sql = f"SELECT DISTINCT name FROM {SNAPSHOTS_TABLE} ORDER BY name"
        try:
            table = client.query_arrow(sql)
        except Exception as err:
            raise CatalogQueryError(str(err), sql) from err
        return [v.decode() if isinstance(v, bytes) else str(v) for v in table.column("name").to_pylist()]

    def snapshot_names(self) -> list[str]:
        """Names of the stored dataset snapshots, sorted.

        Example:
            >>> Catalog("/data/catalog").snapshot_names()
            ['pick-v3']
        """
        with self._session() as session:
            self._ensure_snapshots(session)
            return self._snapshot_names(session.client)
