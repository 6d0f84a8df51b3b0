"""Loader benchmark: pi_loader vs LeRobotDataset v3 vs Mosaic streaming vs the raw decode limit."""
