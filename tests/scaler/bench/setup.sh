#!/usr/bin/env bash
# Builds the benchmarks' load generators from the Go module proxy at the versions tools/go.mod
# pins, into $COZY_TOOLS/bench/bin/<name>-<version> (outside the clone, so a warm run skips the
# build): ghz (gRPC), hey (HTTP) and burst (ours, tools/burst: every GetMetrics at one instant,
# versioned by its source's hash). Prints `name=path` per tool. Niced: the machine is shared.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
: "${COZY_TOOLS:=$HOME/.cache/cozy-autoscaling}"
BIN="$COZY_TOOLS/bench/bin"
mkdir -p "$BIN"
exec 9>"$BIN/.lock"
flock 9
# shellcheck source=tests/lib/go.sh
. "$HERE/../../lib/go.sh"
cd "$HERE/tools"
for spec in ghz=github.com/bojand/ghz/cmd/ghz hey=github.com/rakyll/hey burst=./burst; do
  name=${spec%%=*} pkg=${spec#*=}
  if [[ $pkg == ./* ]]; then
    version=src-$(cat "$pkg"/*.go go.mod go.sum | sha256sum | cut -c1-12)
  else
    version=$(go list -m -f '{{.Version}}' "$(go list -f '{{.Module.Path}}' "$pkg")")
  fi
  out="$BIN/$name-$version"
  if [[ ! -x "$out" ]]; then
    echo "bench setup: building $name $version ($pkg), about a minute cold" >&2
    CGO_ENABLED=0 nice -n 10 go build -o "$out.tmp" "$pkg"
    mv "$out.tmp" "$out"
  fi
  echo "$name=$out"
done
