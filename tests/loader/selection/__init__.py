"""Tests of pi_loader.selection."""
