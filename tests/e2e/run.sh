#!/usr/bin/env bash
# End-to-end suite: a real etcd, kube-apiserver, kube-controller-manager (HPA), KEDA operator and
# metrics apiserver, Flux helm-controller shards, VictoriaMetrics, our scaler and webhook, all as
# processes on loopback. Runs standalone (installs/builds what is missing; cold builds take a while)
# and as a suite of ./run.sh test. Extra pytest arguments pass through, e.g. tests/e2e/run.sh -k loop
# E2E_KEEP=1 keeps the process logs of a passing run (a failing run always keeps them).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here/../.."
. tests/lib/pytest.sh
if [[ ! -x "$COZY_TOOLS/venv/bin/python" ]] || ! command -v victoria-metrics >/dev/null; then
  tests/lib/setup.sh
fi
[[ -x "$COZY_TOOLS/helm4/helm" ]] || tests/chartgen/setup.sh
"$here/setup.sh"
cargo build --quiet -p cli -p chartgen
run_pytest "$here" -rs --durations=10 "$@"
