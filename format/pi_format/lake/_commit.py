"""One Delta commit of file actions (adds and removes) with application transactions: the
primitive that pins, compaction and GC share (`LakeWriter` appends through its own copy, tuned
for its group commits). Removes are what delta-rs's Python API lacks a writer for except through
`create_write_transaction`, which takes them with mode "append" (deltalake >= 1.6).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from pi_format.lake._files import WrittenFile
from pi_format.lake.schemas import TABLE_SCHEMAS
from pi_format.lake.tables import post_commit_hooks

# The commitInfo key that tags a commit so its writer can find the version it landed at.
COMMIT_TAG = "pilake.commit"


def commit_actions(
    table: Any,
    name: str,
    *,
    adds: Sequence[WrittenFile] = (),
    removes: Sequence[tuple[str, int | None]] = (),
    data_change: bool = True,
    app_versions: Mapping[str, int] | None = None,
    operation: str = "write",
) -> int:
    """Commit `adds` (files already written under the table) and `removes` ((path as in the
    Delta log, size or None)) to `table` (a deltalake.DeltaTable of lake table `name`) in one
    Delta commit; returns the version it landed at.

    `data_change=False` marks a rearrangement (compaction): the rows stay the same. delta-rs
    checks the commit against every commit since `table`'s snapshot: one that removed a file
    this commit removes makes it fail with CommitFailedError (the caller re-reads and retries),
    a concurrent append does not.

    Example:
        >>> commit_actions(table, "pins", adds=[written], app_versions={"pilake-pin-x": 1})
        12
    """
    from deltalake import CommitProperties, Transaction
    from deltalake.transaction import RemoveAction

    if not adds and not removes:
        raise ValueError("a commit needs at least one file to add or remove")
    tag = uuid.uuid4().hex
    now_ms = int(time.time() * 1000)
    actions: list[Any] = []
    for written in adds:
        action = written.add_action()
        action.data_change = data_change
        actions.append(action)
    for path, size in removes:
        actions.append(RemoveAction(path=path, data_change=data_change, deletion_timestamp=now_ms, size=size))
    transactions = [Transaction(a, v) for a, v in (app_versions or {}).items()]
    before = int(table.version())
    table.create_write_transaction(
        actions,
        "append",
        TABLE_SCHEMAS[name],
        commit_properties=CommitProperties(
            custom_metadata={COMMIT_TAG: tag, "pilake.operation": operation},
            app_transactions=transactions or None,
        ),
        post_commithook_properties=post_commit_hooks(),
    )
    table.update_incremental()
    after = int(table.version())
    if after == before + 1:
        return after
    for entry in table.history(max(after - before, 1)):
        if entry.get(COMMIT_TAG) == tag:
            return int(entry["version"])
    raise RuntimeError(f"commit {tag} to the {name} table is not in versions {before + 1}..{after}")


def file_sizes(table: Any) -> dict[str, int]:
    """Path (as in the Delta log) -> size in bytes of every file of `table`'s current snapshot."""
    import pyarrow as pa

    actions = pa.table(table.get_add_actions(flatten=True))
    return dict(
        zip(
            actions.column("path").to_pylist(),
            (int(s) for s in actions.column("size_bytes").to_pylist()),
            strict=True,
        )
    )
