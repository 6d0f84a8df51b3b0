"""What `pilake verify` finds beyond the bytes of the files: a Delta log with a commit missing,
and an episode whose rows are in the lake but whose commit marker is not (architecture
decisions 3 and 10).

* Log gaps (`log_gaps`): from a table's newest checkpoint (or version 0 without one) to its
  newest version, every JSON commit must be there; a missing one is a `lost_commit` fault.
* Vanished episodes (`vanished_episodes`): every episode with rows in `steps` (the scrub read
  their ids) must have an episodes row (a marker) for some attempt, or be deleted. One without
  is an episode the lake lost: its markers' file is damaged (the episode is then named on that
  file's fault) or a commit of the episodes log is gone (the newest one deleted leaves no gap:
  the rows it made visible are the only trace). A writer between its steps and episodes commits
  looks the same for a moment; the detail says so. `pilake repair` rebuilds such an episode from
  raw as a new attempt.
"""

from __future__ import annotations

from typing import Any

from pi_format import LakeLayout

from pi_jobs.integrity._scan import KIND_LOST, Fault, FileResult


def log_gaps(layout: LakeLayout, table: str) -> list[Fault]:
    """A `lost_commit` fault per JSON commit missing between `table`'s newest checkpoint and its
    newest version."""
    from pi_format.lake import table_filesystem
    from pyarrow import fs as pafs

    fs, base = table_filesystem(layout.table(table))
    try:
        infos = fs.get_file_info(pafs.FileSelector(f"{base}/_delta_log", allow_not_found=True))
    except OSError:
        return []
    commits: set[int] = set()
    checkpoints: set[int] = set()
    for info in infos:
        name = info.base_name
        head = name.split(".", 1)[0]
        if not head.isdigit():
            continue
        if name.endswith(".json"):
            commits.add(int(head))
        elif ".checkpoint." in name and name.endswith(".parquet"):
            checkpoints.add(int(head))
    if not commits:
        return []
    newest = max(max(commits), max(checkpoints, default=-1))
    start = max((c for c in checkpoints if c <= newest), default=0)
    missing = [v for v in range(start + (1 if checkpoints else 0), newest + 1) if v not in commits]
    faults = []
    for version in missing:
        detail = (
            f"commit {version} of the {table} table's Delta log is missing (the log has commits "
            f"{start}..{newest} around it): what it added is not in the table; deleted by hand, or "
            "lost by the storage"
        )
        faults.append(Fault(KIND_LOST, table, f"_delta_log/{version:020d}.json", detail))
    return faults


def vanished_episodes(
    layout: LakeLayout, results: list[FileResult], markers: Any, faults: list[Fault]
) -> list[Fault]:
    """Name each episode with steps rows (in `results`, the files scrubbed) and no marker in
    `markers` (the readable episodes rows; None: none) that is not deleted: on the fault of the
    damaged episodes file whose logged id range holds it (in `faults`), else as a new
    `lost_commit` fault of the episodes table. Returns the new faults."""
    from pi_format.lake import read_deleted_ids

    marked: set[str] = set()
    if markers is not None and markers.num_rows:
        marked = {str(e) for e in markers.column("episode_id").to_pylist()}
    try:
        deleted = {str(e) for e in read_deleted_ids(layout).to_pylist()}
    except Exception:  # a damaged deletions table is a fault of its own
        deleted = set()
    found: dict[str, tuple[str, str]] = {}  # episode -> (attempt, steps file)
    for result in results:
        if result.table != "steps":
            continue
        for episode, attempt in result.attempts:
            if episode not in marked and episode not in deleted:
                found[episode] = max(found.get(episode, (attempt, result.file)), (attempt, result.file))
    if not found:
        return []
    ranges = _episodes_file_ranges(layout)
    damaged = [f for f in faults if f.table == "episodes" and f.file in ranges]
    new: list[Fault] = []
    for episode, (attempt, steps_file) in sorted(found.items()):
        holders = [f for f in damaged if ranges[f.file][0] <= episode <= ranges[f.file][1]]
        for holder in holders:  # every fault of the damaged file names it
            holder.episodes = sorted({*holder.episodes, (episode, attempt)})
        if holders:
            continue
        detail = (
            f"episode {episode}: its steps rows (attempt {attempt}, {steps_file}) are in the lake but "
            "no episodes row (commit marker) of any attempt is: a commit of the episodes log is lost "
            "(or a writer is between its steps and episodes commits: run verify again once it is done)"
        )
        new.append(Fault(KIND_LOST, "episodes", "_delta_log", detail, episodes=[(episode, attempt)]))
    return new


def _episodes_file_ranges(layout: LakeLayout) -> dict[str, tuple[str, str]]:
    """Episodes data file -> (min, max) episode_id, from its add action's statistics."""
    import pyarrow as pa
    from deltalake import DeltaTable

    try:
        actions = pa.table(DeltaTable(layout.episodes).get_add_actions(flatten=True))
    except Exception:  # the log does not load: a fault of its own
        return {}
    names = actions.column_names
    if "min.episode_id" not in names or "max.episode_id" not in names:
        return {}
    out = {}
    for path, lo, hi in zip(
        actions.column("path").to_pylist(),
        actions.column("min.episode_id").to_pylist(),
        actions.column("max.episode_id").to_pylist(),
        strict=True,
    ):
        if lo is not None and hi is not None:
            out[str(path)] = (str(lo), str(hi))
    return out
