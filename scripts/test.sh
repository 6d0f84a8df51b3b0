#!/usr/bin/env bash
# The test command: lint, types, import layers, then every test (unit and integration against the real broker,
# the real PyFlink job, real Delta tables and chdb).
set -euo pipefail
cd "$(dirname "$0")/.."
export OPENBLAS_NUM_THREADS=1
.venv/bin/ruff check .
.venv/bin/ruff format --check format ingest jobs catalog loader tests benchmarks deploy scripts
.venv/bin/mypy format ingest jobs catalog loader tests benchmarks deploy
.venv/bin/lint-imports          # the layer contracts in pyproject.toml (README "Layout")
.venv/bin/pytest -q "$@"
