#!/usr/bin/env bash
# The test command: lint, types, import layers, the docs site, then every test (unit and integration against the real broker,
# the real PyFlink job, real Delta tables and chdb).
set -euo pipefail
cd "$(dirname "$0")/.."
export OPENBLAS_NUM_THREADS=1
.venv/bin/ruff check .
.venv/bin/ruff format --check format ingest jobs catalog loader tests benchmarks deploy scripts
.venv/bin/mypy format ingest jobs catalog loader tests benchmarks deploy
.venv/bin/lint-imports          # the layer contracts in pyproject.toml (docs/layout.md)
# the docs site (mkdocs.yml, docs/, the API reference from the docstrings): a warning, a broken link
# or anchor, or a page left out of the nav fails it (a few seconds)
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --quiet
# the 30 slowest tests are printed at the end, to keep CI well under its hour
.venv/bin/pytest -q --durations=30 "$@"
