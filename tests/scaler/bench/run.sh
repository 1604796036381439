#!/usr/bin/env bash
# Benchmark of `scaler serve` under KEDA's call pattern (a release build; takes a few minutes).
# Not part of ./run.sh test. Arguments pass through to bench.py, e.g. --clusters 500 --duration 10
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here/../../.."
: "${COZY_TOOLS:=$HOME/.cache/cozy-autoscaling}"
export PYTHONDONTWRITEBYTECODE=1
cargo build --quiet --release -p cli
exec "$COZY_TOOLS/venv/bin/python" "$here/bench.py" --scaler "${CARGO_TARGET_DIR:-target}/release/scaler" "$@"
