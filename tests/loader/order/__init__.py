"""Tests of pi_loader.order."""
