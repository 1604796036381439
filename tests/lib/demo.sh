#!/usr/bin/env bash
# `./run.sh demo`: starts a throwaway VictoriaMetrics on a free loopback port, imports the sample CNPG
# series of tests/lib/demo-series.txt, prints the scaler's decision for that cluster, then cleans up.
set -euo pipefail
cd "$(dirname "$0")/../.."
scaler=${SCALER_BIN:-${CARGO_TARGET_DIR:-target}/debug/scaler}
[[ -x $scaler ]] || { echo "demo: $scaler is missing; run: cargo build -p cli" >&2; exit 1; }
command -v victoria-metrics >/dev/null || { echo "demo: victoria-metrics is missing; run: tests/lib/setup.sh" >&2; exit 1; }

tmp=$(mktemp -d)
vm_pid=
cleanup() {
  if [[ -n $vm_pid ]]; then kill "$vm_pid" 2>/dev/null || true; wait "$vm_pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
vm=http://127.0.0.1:$port
# latencyOffset=0s: answer "now" queries right away; retention: keep the backfilled samples.
victoria-metrics -storageDataPath="$tmp/vm" -httpListenAddr="127.0.0.1:$port" -retentionPeriod=100y \
  -search.latencyOffset=0s -loggerLevel=WARN >"$tmp/vm.log" 2>&1 &
vm_pid=$!
for _ in $(seq 100); do curl -sf "$vm/health" >/dev/null && break; sleep 0.1; done
curl -sf "$vm/health" >/dev/null || { echo "demo: VictoriaMetrics did not start:" >&2; cat "$tmp/vm.log" >&2; exit 1; }

# 11 samples per series, 30 s apart, ending now (timestamps in ms).
now_ms=$(( $(date +%s) * 1000 ))
awk -v now="$now_ms" '!/^#/ && NF == 3 {
  for (i = 0; i <= 10; i++) printf "%s %.6f %.0f\n", $1, $2 + $3 * i, now - (10 - i) * 30000
}' tests/lib/demo-series.txt >"$tmp/samples.prom"
curl -sf --data-binary @"$tmp/samples.prom" "$vm/api/v1/import/prometheus"
curl -sf "$vm/internal/force_flush" >/dev/null
# Imported rows become searchable about a second after the flush: poll instead of sleeping.
ready=
for _ in $(seq 100); do
  if curl -sf --get --data-urlencode 'query=count(cnpg_pg_replication_in_recovery{namespace="demo"})' \
      "$vm/api/v1/query" | grep -q '"value":\[[0-9.]*,"4"\]'; then ready=1; break; fi
  sleep 0.1
done
[[ -n $ready ]] || { echo "demo: the imported series never became queryable" >&2; exit 1; }

echo "\$ scaler explain --prometheus-url $vm --namespace demo --cluster pg --target 100 --max-replicas 6 --max-replication-lag-seconds 30 --topology metrics"
echo
"$scaler" explain --prometheus-url "$vm" --namespace demo --cluster pg --target 100 --max-replicas 6 \
  --max-replication-lag-seconds 30 --topology metrics
