"""Tests of pi_loader.delivery."""
