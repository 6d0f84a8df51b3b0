"""Fingerprints of a Dataset: what hosts of one run compare (`pi_loader.agree`).

The collectives that compare them live in `pi_loader.selection._agreement`; the fingerprint of
a Dataset lives here, beside the spec it hashes, so that selection never imports samples.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

from pi_loader.samples._spec import SampleSpec
from pi_loader.selection._snapshot import Snapshot

FINGERPRINT_FORMAT = "pi_loader.fingerprint/1"


def dataset_fingerprint(snapshot: Snapshot, spec: SampleSpec, seed: int) -> str:
    """16 hex digits of sha256 over what decides a Dataset's samples and their order: the table
    versions and (episode, attempt) pairs the snapshot pins, the (resolved) sample spec and the
    seed. The epoch is left out (it changes during a run; `Loader`'s fingerprint has it).

    The lake root is left out on purpose, as in `Snapshot.fingerprint`: the same versions and
    attempts are the same data wherever the lake is mounted (s3:// on one host, a local copy on
    another), and it is shown in `HostsDisagreeError` when hosts differ.

    Example:
        >>> dataset_fingerprint(ds.snapshot, ds.spec, ds.seed) == ds.fingerprint
        True
    """
    spec_fields = dataclasses.asdict(spec)
    if not spec_fields["annotations"]:  # fingerprints of specs without them stay what they were
        del spec_fields["annotations"]
    header = {
        "format": FINGERPRINT_FORMAT,
        "table_versions": sorted(snapshot.table_versions.items()),
        "spec": spec_fields,
        "seed": int(seed),
    }
    digest = hashlib.sha256(json.dumps(header, sort_keys=True).encode())
    for e, a in zip(snapshot.episode_ids, snapshot.attempt_ids, strict=True):
        digest.update(f"{e}\x1f{a}\x1e".encode())
    return digest.hexdigest()[:16]


def dataset_summary(snap: Snapshot, spec: SampleSpec, seed: int) -> dict[str, Any]:
    return {
        "kind": "Dataset",
        "lake_root": snap.lake_root,
        "table_versions": dict(snap.table_versions),
        "episodes": len(snap.episode_ids),
        "episode_pairs": snap.fingerprint,
        "spec": repr(spec),
        "seed": seed,
    }
