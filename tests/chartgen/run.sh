#!/usr/bin/env bash
# chartgen suite: generated charts are up to date, lint clean with Helm 3 and Helm 4, and every
# mode, guard and shard variant renders to schema-valid objects (pytest, parsed YAML).
set -euo pipefail
cd "$(dirname "$0")/../.."
: "${COZY_TOOLS:=$HOME/.cache/cozy-autoscaling}"
export COZY_TOOLS

cargo build --quiet -p chartgen
export CHARTGEN_BIN="$PWD/target/debug/chartgen"

echo "-- chartgen package --check / app --check"
"$CHARTGEN_BIN" package --check
"$CHARTGEN_BIN" app --chart charts/example-postgres --check

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
# Other suites add pytest plugins to the shared venv; this suite needs none of them.
export PYTEST_DISABLE_PLUGIN_AUTOLOAD=1
exec "$COZY_TOOLS/venv/bin/python" -m pytest -q -p no:cacheprovider tests/chartgen
