#!/usr/bin/env bash
# Installs the tools every suite shares into $COZY_TOOLS (outside the clone), idempotently:
# VictoriaMetrics (Debian) and a Python venv with grpcio for the independent gRPC client.
set -euo pipefail
: "${COZY_TOOLS:=$HOME/.cache/cozy-autoscaling}"
mkdir -p "$COZY_TOOLS"

if ! command -v victoria-metrics >/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends victoria-metrics >/dev/null
fi
# The Debian package starts nothing by itself; tests start their own instance on loopback.

if [[ ! -x "$COZY_TOOLS/venv/bin/python" ]]; then
  python3 -m venv "$COZY_TOOLS/venv"
fi
"$COZY_TOOLS/venv/bin/pip" install -q --disable-pip-version-check \
  grpcio grpcio-tools grpcio-health-checking pytest requests pyyaml kubernetes-validate jsonschema jsonpatch
