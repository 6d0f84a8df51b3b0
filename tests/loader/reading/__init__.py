"""Tests of pi_loader.reading."""
