#!/usr/bin/env bash
# Live Redis evidence: a real master and two replicas (Debian's redis-server), three real sentinels,
# a real redis_exporter per instance (Debian's prometheus-redis-exporter), scraped by a real
# VictoriaMetrics, read by `scaler serve`, driven by the independent gRPC client of tests/scaler.
# See docs/redis.md. Extra pytest arguments pass through, e.g. tests/liveredis/run.sh -k sync -x
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here/../.."
. tests/lib/pytest.sh
"$here/setup.sh"  # idempotent: what a standalone run needs (a fresh venv has no driver)
cargo build --quiet -p cli
run_pytest "$here" --durations=8 -rxX "$@"
