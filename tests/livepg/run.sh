#!/usr/bin/env bash
# Live PostgreSQL evidence: real primaries and streaming replicas (Debian's PostgreSQL), CNPG's default
# monitoring queries run by tests/livepg/exporter.py, scraped by a real VictoriaMetrics, read by
# `scaler serve`, driven by the independent gRPC client of tests/scaler. See docs/livepg.md.
# Extra pytest arguments pass through, e.g. tests/livepg/run.sh -k lag -x
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here/../.."
. tests/lib/pytest.sh
"$here/setup.sh"  # idempotent: what a standalone run needs (a fresh venv has no driver)
cargo build --quiet -p cli
run_pytest "$here" --durations=8 -rxX "$@"
