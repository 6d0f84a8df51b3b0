"""Reading: bytes of the lake into arrays, with bounded caches.

Storage (local, s3://) and its block cache, open file handles, Parquet footers and pages (the
loader's own page decoder), host indexes of row groups, the steps reader (proprio, actions) and
the video chunk reader, the lake tables' visible rows and locators. Knows nothing of selections,
samples or delivery: the rooms above call down into it.
"""
