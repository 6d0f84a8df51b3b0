"""Order: the deterministic permutation of samples, its blocks and its shards.

Pure functions of (sample count, seed, epoch, shard index, shard count) (decision 5); no I/O.
Samples (a Dataset's own order) and delivery (a Loader's shards and batches) both call it.
"""
