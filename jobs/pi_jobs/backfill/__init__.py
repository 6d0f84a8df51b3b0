"""Backfill (`pilake backfill`): re-featurize committed episodes from the lake's raw table with
a named, versioned featurizer, as a PyFlink BATCH job, exactly once and restartable.

Data flow: the lake's `raw` table (bronze, what Kafka delivered) -> assemble (pi_format.wire) ->
featurize (pi_jobs.stream.featurize with the featurizer's config) -> `LakeWriter` group commits
with `supersede=True` -> catalog. The new attempts either supersede the visible ones in the same
lake (the latest commit wins; dataset pins keep reading the attempts they name) or go into a
separate lake `<lake>/derived/<into>`.

| module | owns |
| --- | --- |
| `featurizers` | the registry: name -> (version, FeaturizeConfig) |
| `config` | `BackfillConfig`, `BackfillReport`, `BackfillError` |
| `job` | the Flink job graph (BATCH: collection -> key by episode -> function) |
| `driver` | `plan_backfill`, `run_backfill`: plan, run, progress, the catalog record |
| `_function` | the worker-side keyed function |
"""

from pi_jobs.backfill.config import BackfillConfig, BackfillError, BackfillReport
from pi_jobs.backfill.driver import BackfillPlan, plan_backfill, run_backfill
from pi_jobs.backfill.featurizers import FEATURIZERS, Featurizer, get_featurizer

__all__ = [
    "FEATURIZERS",
    "BackfillConfig",
    "BackfillError",
    "BackfillPlan",
    "BackfillReport",
    "Featurizer",
    "get_featurizer",
    "plan_backfill",
    "run_backfill",
]
