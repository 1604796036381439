#!/usr/bin/env bash
# chartgen suite: generated charts are up to date, lint clean with Helm 3 and Helm 4, and every
# mode, guard and shard variant renders to schema-valid objects (pytest, parsed YAML); the package's
# Grafana dashboard queries return data from the real binaries' metrics (needs the scaler binary).
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/lib/pytest.sh
# The dashboard test runs the webhook suite's API emulator (kmock): a focused run installs it too.
tests/webhook/setup.sh

cargo build --quiet -p chartgen -p cli
# Where cargo put it (testkit.cargo_bin resolves it the same way for pytest).
chartgen="${CARGO_TARGET_DIR:-target}/debug/chartgen"

echo "-- chartgen package --check / app --check"
"$chartgen" package --check
"$chartgen" app --chart charts/example-postgres --check

echo "-- helm lint --strict (helm 3 and helm 4)"
home=$(mktemp -d)
trap 'rm -rf "$home"' EXIT
for chart in charts/*/; do
  [[ -f "$chart/Chart.yaml" ]] || continue
  for h in helm3 helm4; do
    HOME="$home" "$COZY_TOOLS/$h/helm" lint --strict --quiet "$chart" >/dev/null
    echo "ok $h lint $chart"
  done
done

echo "-- pytest"
run_pytest tests/chartgen
