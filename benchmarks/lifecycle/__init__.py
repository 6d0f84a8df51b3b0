"""Benchmarks of a lake's maintenance over its life (compaction, GC)."""
