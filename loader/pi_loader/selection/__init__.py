"""Selection: which committed episodes a Dataset reads, pinned.

SQL over the catalog, pins and explicit ids resolved into a `Snapshot` of (episode, attempt)
rows and table versions; the hosts of a run agreeing on one (`agree`, `broadcast_snapshot`).
Uses reading (the episodes table); never samples or delivery.
"""
