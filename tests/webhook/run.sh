#!/usr/bin/env bash
# Tests of `scaler webhook` over HTTPS (requests + jsonpatch as independent client and JSON Patch
# implementation) and its Kubernetes side against an in-memory API (kmock, see emulator.py).
# Extra pytest arguments pass through, e.g. tests/webhook/run.sh -k concurrent -x
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here/../.."
. tests/lib/pytest.sh
# Its Python packages (kmock, aiohttp, ...): a standalone run on a venv made by another suite.
"$here/setup.sh"
cargo build --quiet -p cli
run_pytest "$here" --durations=5 "$@"
