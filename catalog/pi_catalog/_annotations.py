"""Episode annotations in the catalog (`annotations`): the part of `Catalog` that indexes the
lake's `annotations` table (pi_format.lake.annotations) so SQL can select episodes by them:

    SELECT episode_id FROM episodes WHERE episode_id IN
        (SELECT episode_id FROM annotations WHERE kind = 'instruction' AND value ILIKE '%cube%')

Derived like the episode index (architecture decision 7): `pilake annotate import` records its
new rows here (the sync), `Catalog.rebuild` recreates the table from the lake's current
annotations of visible episodes, and `forget_episodes` drops a deleted episode's rows with it.
The rule "the highest version of a (episode, span, kind, source) is current" is the table
engine's own: a ReplacingMergeTree on that key with `version` as its version column, read
through the view with FINAL, as `episodes` is.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pi_format import LakeLayout
from pi_format.lake import ANNOTATIONS_SCHEMA, AnnotationStore

from pi_catalog._errors import CatalogQueryError

ANNOTATIONS_INDEX = "annotations_index"
ANNOTATIONS_VIEW = "annotations"

_ARROW_SCHEMA = pa.schema(
    [pa.field(f.name, f.type, nullable=False) for f in ANNOTATIONS_SCHEMA]
    + [pa.field("indexed_at", pa.timestamp("ms", tz="UTC"), nullable=False)]
)
_CH = {pa.string(): "String", pa.int32(): "Int32", pa.int64(): "Int64"}


def annotations_ddl(table: str = ANNOTATIONS_INDEX) -> str:
    columns = ",\n".join(f"    {f.name} {_CH[f.type]}" for f in ANNOTATIONS_SCHEMA)
    return (
        f"CREATE TABLE IF NOT EXISTS {table} (\n{columns},\n    indexed_at DateTime64(3, 'UTC')\n) "
        "ENGINE = ReplacingMergeTree(version) ORDER BY (episode_id, kind, source, step_start, step_end)"
    )


ANNOTATIONS_VIEW_DDL = (
    f"CREATE VIEW IF NOT EXISTS {ANNOTATIONS_VIEW} AS "
    f"SELECT * EXCEPT indexed_at FROM {ANNOTATIONS_INDEX} FINAL"
)


def annotation_index_rows(rows: pa.Table) -> pa.Table:
    """Rows of ANNOTATIONS_SCHEMA as the catalog takes them (plus `indexed_at`)."""
    table = rows.select(ANNOTATIONS_SCHEMA.names)
    now_ms = time.time_ns() // 1_000_000
    stamp = pa.array([now_ms] * table.num_rows, pa.int64()).cast(pa.timestamp("ms", tz="UTC"))
    return table.append_column("indexed_at", stamp).cast(_ARROW_SCHEMA)


class AnnotationsMixin:
    """`Catalog`'s annotation methods (`Catalog` provides the session and the schema)."""

    if TYPE_CHECKING:

        def _session(self) -> contextlib.AbstractContextManager[Any]: ...

        def _ensure(self, session: Any) -> None: ...

        @staticmethod
        def _command(client: Any, sql: str) -> None: ...

    def _ensure_annotations(self, session: Any) -> None:
        self._ensure(session)
        for ddl in (annotations_ddl(), ANNOTATIONS_VIEW_DDL):
            if ddl not in session.ensured:
                self._command(session.client, ddl)
                session.ensured.add(ddl)

    def record_annotations(self, rows: pa.Table) -> int:
        """Index annotations rows (pi_format.lake.ANNOTATIONS_SCHEMA) of visible episodes;
        returns how many were inserted. Idempotent: the view keeps one row per (episode, span,
        kind, source), the highest version.

        Example:
            >>> catalog.record_annotations(AnnotationStore(layout).current(["r1-000001"]))
            2
        """
        if rows.num_rows == 0:
            return 0
        table = annotation_index_rows(rows)
        with self._session() as session:
            self._ensure_annotations(session)
            _insert(session.client, ANNOTATIONS_INDEX, table)
        return table.num_rows

    def rebuild_annotations(self, layout: LakeLayout) -> int:
        """Recreate the annotations table from the lake's current annotations of its visible
        episodes and swap it in atomically; returns the rows indexed (`Catalog.rebuild` calls it).

        Example:
            >>> catalog.rebuild_annotations(LakeLayout("/data/lake"))
            240
        """
        rows = AnnotationStore(layout).current()
        staging = f"{ANNOTATIONS_INDEX}_rebuild_{uuid.uuid4().hex[:12]}"
        with self._session() as session:
            self._ensure_annotations(session)
            self._command(session.client, annotations_ddl(staging))
            try:
                if rows.num_rows:
                    _insert(session.client, staging, annotation_index_rows(rows))
                self._command(session.client, f"EXCHANGE TABLES {staging} AND {ANNOTATIONS_INDEX}")
            finally:
                self._command(session.client, f"DROP TABLE IF EXISTS {staging} SYNC")
        return rows.num_rows


def _insert(client: Any, table: str, rows: pa.Table) -> None:
    try:
        client.insert_arrow(table, rows)
    except Exception as err:
        raise CatalogQueryError(str(err), f"INSERT INTO {table} ({rows.num_rows} rows)") from err
