"""Delivery: samples into batches on the training host, fast.

The `Loader` (sharded order, resumable state), its worker processes and shared-memory batch
slots, the in-flight budget that keeps every worker busy, device transfer (pinned staging
buffers, copies overlapped with compute), framework adapters (torch, Grain, JAX) and metrics.
The top room: nothing in pi_loader imports it except the package's public API.
"""
