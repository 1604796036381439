#!/usr/bin/env bash
# Tests of `scaler webhook` over HTTPS (requests + jsonpatch as independent client and JSON Patch
# implementation) and its Kubernetes side against an in-memory API (kmock, see emulator.py).
# Extra pytest arguments pass through, e.g. tests/webhook/run.sh -k concurrent -x
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here/../.."
: "${COZY_TOOLS:=$HOME/.cache/cozy-autoscaling}"
export PYTHONDONTWRITEBYTECODE=1
# kmock ships a pytest plugin; this suite starts its own emulator process instead.
export PYTEST_DISABLE_PLUGIN_AUTOLOAD=1
cargo build --quiet -p scaler
exec "$COZY_TOOLS/venv/bin/python" -m pytest "$here" -q -p no:cacheprovider --durations=5 "$@"
