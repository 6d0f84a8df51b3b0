"""Samples: what one training sample is and how it is cut from the lake.

The `SampleSpec`, the sample index over the selected episodes, the readers assembled for a
selection, `gather` (steps windows, frames, padding masks), the map-style `Dataset`, its
fingerprint and normalization statistics. Uses selection, order and reading; never delivery.
"""
