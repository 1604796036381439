#!/usr/bin/env bash
# Integration tests of `scaler serve`: a real VictoriaMetrics fed synthetic CNPG series, and an
# independent Python gRPC client generated from proto/externalscaler.proto calling it like KEDA.
# Extra pytest arguments pass through, e.g. tests/scaler/run.sh -k lag -x
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here/../.."
. tests/lib/pytest.sh
cargo build --quiet -p cli
# The Rust tests that need an outside binary (victoria-metrics), left out of a bare `cargo test`.
cargo test --quiet -p cli --test explain -- --ignored
run_pytest "$here" --durations=8 -rxX "$@"
