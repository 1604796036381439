#!/usr/bin/env bash
# Issue 14's side-by-side benchmarks, in one run (figures, not tests; not part of ./run.sh test):
# backend queries per refresh before/after batching at 1k/5k/20k ScaledObjects, scaler memory,
# GetMetrics of the scaler against a no-op gRPC stand-in (ghz), webhook stamping against a no-op
# TLS stand-in (hey). Release builds; about 10 minutes at the default sizes on 2 cores.
#   tests/scaler/bench/side_by_side.sh                      # everything, default sizes
#   SIZES=1000 WEBHOOK=0 tests/scaler/bench/side_by_side.sh # a quick look at one size
# Figures go to stdout and, as JSON, to $OUT (default /tmp/side-by-side-<time>).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$here/../../.."
cd "$repo"
: "${COZY_TOOLS:=$HOME/.cache/cozy-autoscaling}"
: "${SIZES:=1000,5000,20000}"
: "${WEBHOOK:=1}"
: "${OUT:=/tmp/side-by-side-$(date -u +%Y%m%dT%H%M%SZ)}"
export PYTHONDONTWRITEBYTECODE=1
mkdir -p "$OUT"
cargo build --quiet --release -p cli --bin scaler -p scaler --example noop_external_scaler \
  -p sharding --example noop_admission
ghz='' hey=''
eval "$("$here/setup.sh")" # sets ghz=… hey=…
py="$COZY_TOOLS/venv/bin/python"
release="${CARGO_TARGET_DIR:-target}/release"
echo "scaler at $(git rev-parse --short HEAD); load average $(cut -d' ' -f1-3 /proc/loadavg)"
"$py" "$here/side_by_side.py" --scaler "$release/scaler" \
  --noop "$release/examples/noop_external_scaler" --ghz "$ghz" --sizes "$SIZES" \
  --json "$OUT/scaler.json"
if [[ "$WEBHOOK" == 1 ]]; then
  "$py" tests/webhook/bench_vs_noop.py --scaler "$release/scaler" \
    --noop "$release/examples/noop_admission" --hey "$hey" --json "$OUT/webhook.json"
fi
echo "figures: $OUT"
