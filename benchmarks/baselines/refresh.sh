#!/usr/bin/env bash
# Re-measure the committed baselines: the scale benchmark (full sizes unless arguments say
# otherwise) and a quick loader benchmark run, then copy their JSON here. Run from anywhere,
# with the project's venv built; the peers' venv is built by the loader benchmark when missing.
#
#   bash benchmarks/baselines/refresh.sh                          # 1k, 10k, 100k + 500 real episodes
#   bash benchmarks/baselines/refresh.sh --sizes 1000,10000       # arguments go to benchmarks.scale.run
#   INGEST_JSON=path/ingest.json bash benchmarks/baselines/refresh.sh
#
# The runs' own output (JSON, PNG, logs) stays under benchmarks/baselines/results/<time>/
# (git-ignored); only the two JSON files are copied next to this script, and the READMEs'
# figures re-rendered from them. Nothing is committed.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=.venv/bin/python
RUN=benchmarks/baselines/results/$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$RUN"
ingest=()
if [[ -n "${INGEST_JSON:-}" ]]; then ingest=(--ingest-json "$INGEST_JSON"); fi

start=$(date +%s)
"$PY" -m benchmarks.scale.run --out "$RUN/scale" "${ingest[@]}" "$@" 2>&1 | tee "$RUN/scale.log"
echo "scale benchmark: $(( $(date +%s) - start )) s"
start=$(date +%s)
"$PY" -m benchmarks.loader.run --quick --out "$RUN/loader" 2>&1 | tee "$RUN/loader.log"
echo "loader benchmark (quick): $(( $(date +%s) - start )) s"

cp "$RUN/scale/scale.json" benchmarks/baselines/scale.json
cp "$RUN/loader/loader.json" benchmarks/baselines/loader.json
echo "copied $RUN/scale/scale.json and $RUN/loader/loader.json to benchmarks/baselines/"
"$PY" -m benchmarks.render_docs   # the READMEs' tables follow the new JSON
