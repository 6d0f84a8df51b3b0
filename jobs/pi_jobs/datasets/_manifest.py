"""The copy manifest: what a `pilake dataset copy` has already sent and checked, kept at the
destination (`<dest>/_pilake_copy/copy-<pin>.json`) so that the same command after a SIGKILL
sends none of it again.

A file is entered only after its bytes were written and read back equal to the source's
(sha256) and its pages' CRCs checked: an entry is a finished object. The manifest is rewritten
whole (a small JSON) at most every `flush_s` seconds and at the end; what a kill loses of it is
found at the destination again by the resumed copy (a file of the right size whose pages check)
without sending it. The manifest is a resume aid, never the truth: the commits are decided on
what the destination's Delta log holds.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from pi_jobs.datasets._stores import LakeStore

MANIFEST_FORMAT = "pilake-copy-manifest/1"
MANIFEST_DIR = "_pilake_copy"
# A manifest over this size is refused before it is parsed (a million files is ~200 MB: this
# leaves room for that and refuses a file someone else put there by mistake).
MAX_MANIFEST_BYTES = 512 * 2**20


@dataclass(frozen=True, slots=True)
class DoneFile:
    """One file copied and checked: size, sha256 and its Delta add-action facts."""

    size: int
    sha256: str
    num_rows: int
    stats_json: str

    def to_dict(self) -> dict[str, Any]:
        return {"size": self.size, "sha256": self.sha256, "num_rows": self.num_rows, "stats": self.stats_json}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DoneFile:
        return cls(int(data["size"]), str(data["sha256"]), int(data["num_rows"]), str(data["stats"]))


@dataclass
class CopyManifest:
    """Finished files of the copies into one destination under one pin name.

    Example:
        >>> manifest = CopyManifest.load(store, "pick-v3")
        >>> manifest.done.get("steps/part-fixture-3f6c.parquet")
    """

    store: LakeStore
    pin: str
    done: dict[str, DoneFile] = field(default_factory=dict)
    flush_s: float = 2.0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _writing: threading.Lock = field(default_factory=threading.Lock)  # one write at a time
    _writer: threading.Thread | None = None  # the write behind `add`, while it runs
    _failed: BaseException | None = None  # what that write raised, for the next `flush`
    _flushed_at: float = 0.0
    _dirty: bool = False

    @staticmethod
    def relative_path(pin: str) -> str:
        return f"{MANIFEST_DIR}/copy-{pin}.json"

    @classmethod
    def load(cls, store: LakeStore, pin: str) -> CopyManifest:
        """The manifest of `pin` at `store` (empty when there is none).

        Raises:
            ValueError: a manifest that is too large, not JSON or not a copy manifest.
        """
        relative = cls.relative_path(pin)
        size = store.size(relative)
        manifest = cls(store=store, pin=pin)
        if size is None:
            return manifest
        if size > MAX_MANIFEST_BYTES:
            raise ValueError(
                f"the copy manifest {store.uri(relative)} is {size} bytes (limit {MAX_MANIFEST_BYTES}); "
                "delete it to start the copy afresh (files already copied are found and checked again)"
            )
        text = store.read_text(relative) or ""
        try:
            data = json.loads(text)
            if data.get("format") != MANIFEST_FORMAT:
                raise ValueError(f"format is {data.get('format')!r}, expected {MANIFEST_FORMAT!r}")
            manifest.done = {str(k): DoneFile.from_dict(v) for k, v in data["files"].items()}
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            raise ValueError(
                f"the copy manifest {store.uri(relative)} does not read ({err}); delete it to start the "
                "copy afresh (files already copied are found and checked again)"
            ) from err
        return manifest

    def add(self, relative: str, done: DoneFile) -> None:
        """Enter a finished file; written out behind the caller when `flush_s` passed since the
        last write (a small PUT waits behind every upload in flight on a busy store: ~0.7 s on
        the copy benchmark's SeaweedFS, a transfer thread idle that long), its error raised by
        the next `flush`."""
        with self._lock:
            self.done[relative] = done
            self._dirty = True
            if self._writer is not None or time.monotonic() - self._flushed_at < self.flush_s:
                return
            writer = threading.Thread(target=self._write_behind, name="copy-manifest", daemon=True)
            self._writer = writer
        writer.start()

    def _write_behind(self) -> None:
        try:
            self.flush()
        except BaseException as err:  # raised by the next flush, on the copy's own thread
            self._failed = err
        finally:
            with self._lock:
                self._writer = None

    def flush(self) -> None:
        """Write the manifest out now, after a write behind `add` that is under way.

        Raises:
            OSError: this write, or the last write behind `add`, failed.
        """
        with self._writing:  # snapshots are taken in write order: a later write holds more
            failed, self._failed = self._failed, None
            if failed is not None:
                raise failed
            with self._lock:
                if not self._dirty:
                    return
                text = json.dumps(
                    {
                        "format": MANIFEST_FORMAT,
                        "pin": self.pin,
                        "files": {k: v.to_dict() for k, v in sorted(self.done.items())},
                    },
                    separators=(",", ":"),
                )
                self._dirty = False
                self._flushed_at = time.monotonic()
            self.store.write_text(self.relative_path(self.pin), text)
