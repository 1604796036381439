#!/usr/bin/env bash
# Integration tests of `scaler serve`: a real VictoriaMetrics fed synthetic CNPG series, and an
# independent Python gRPC client generated from proto/externalscaler.proto calling it like KEDA.
# Extra pytest arguments pass through, e.g. tests/scaler/run.sh -k lag -x
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here/../.."
: "${COZY_TOOLS:=$HOME/.cache/cozy-autoscaling}"
export PYTHONDONTWRITEBYTECODE=1
# Other suites install pytest plugins into the shared venv; this suite needs none of them.
export PYTEST_DISABLE_PLUGIN_AUTOLOAD=1
cargo build --quiet -p scaler
exec "$COZY_TOOLS/venv/bin/python" -m pytest "$here" -q -p no:cacheprovider --durations=8 -rxX "$@"
