"""Tests of pi_loader.samples."""
