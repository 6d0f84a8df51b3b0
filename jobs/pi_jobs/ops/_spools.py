"""Every spool an installation uses, and what is left in them (`pilake audit`).

An installation's spools live under `$PILAKE_HOME`: `spool/` (the fleet's uploads, `pilake
upload`, `pilake demo`), `spool-import/` (imports: one spool per import, `spool-import/<key>/`,
see `pi_jobs.importing.staging`), and any other `spool*` directory a tool made (the fault
harness's `spool-writers/`). A spool is a directory that holds a ledger or entries; an import's
staging directory (`.staging-<pid>-<hex>`) is not one: it holds the episodes an import was still
reading, none of them spooled or sent, and is left over only when that import was killed.

Example:
    >>> [p.name for p in find_spools(Path("/data/pilake"))]
    ['spool', 'spool-import', '3f2a9c0b1d7e4a21']
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

# the prefix of an import's staging directory inside its spool root (pi_jobs.importing.staging)
STAGING_PREFIX = ".staging-"
_LEDGER = "ledger.jsonl"
_BUNDLE = ".piep"
_IDS_SHOWN = 5


def _is_spool(path: Path) -> bool:
    return (path / _LEDGER).is_file() or any(path.glob(f"*{_BUNDLE}"))


def find_spools(home: Path) -> list[Path]:
    """The spool directories under `home`: each `spool*` directory and each spool inside one
    (an import's own spool), sorted; directories that do not exist are not listed.

    Example:
        >>> find_spools(Path("/data/pilake"))[0].name
        'spool'
    """
    out: list[Path] = []
    home = Path(home)
    if not home.is_dir():
        return out
    for top in sorted(p for p in home.iterdir() if p.is_dir() and p.name.startswith("spool")):
        out.append(top)
        out += sorted(p for p in top.iterdir() if p.is_dir() and not p.name.startswith(".") and _is_spool(p))
    return out


@dataclass(frozen=True, slots=True)
class SpoolLeftover:
    """Something left in a spool: pending entries (`kind` "pending": spooled, no lake ack yet)
    or an import's staging directory (`kind` "staging": killed while reading; nothing sent)."""

    path: str
    kind: str
    episode_ids: tuple[str, ...] = ()

    def line(self) -> str:
        if self.kind == "staging":
            return (
                f"{self.path}: staging of an import killed while reading ({len(self.episode_ids)} episodes "
                "read, none spooled or sent); remove it, or rerun the import (it removes it)"
            )
        shown = ", ".join(self.episode_ids[:_IDS_SHOWN]) + (
            ", ..." if len(self.episode_ids) > _IDS_SHOWN else ""
        )
        if Path(self.path).name == "spool-import":  # entries straight in it: pilake before issue 31
            return (
                f"{self.path}: {len(self.episode_ids)} episodes left by an import of an older pilake "
                f"[{shown}]; no import sends them any more: rerun that import (it commits them with "
                "their annotations), then delete these *.piep/*.json entries"
            )
        return (
            f"{self.path}: {len(self.episode_ids)} episodes spooled without a lake ack [{shown}]; "
            "a running uploader or stream job may still confirm them, else rerun the upload/import "
            "that owns this spool (it resumes them)"
        )


def spool_leftovers(spool_dirs: list[Path]) -> list[SpoolLeftover]:
    """Pending entries in `spool_dirs` and staging directories beside them.

    Example:
        >>> [x.kind for x in spool_leftovers([Path("/data/pilake/spool-import")])]
        ['staging']
    """
    out: list[SpoolLeftover] = []
    for root in spool_dirs:
        root = Path(root)
        if not root.is_dir():
            continue
        pending = sorted(p.name[: -len(_BUNDLE)] for p in root.glob(f"*{_BUNDLE}"))
        if pending:
            out.append(SpoolLeftover(str(root), "pending", tuple(pending)))
        for staging in sorted(root.glob(f"{STAGING_PREFIX}*")):
            if staging.is_dir():
                read = sorted(p.name[: -len(_BUNDLE)] for p in staging.glob(f"*{_BUNDLE}"))
                out.append(SpoolLeftover(str(staging), "staging", tuple(read)))
    return out
