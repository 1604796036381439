#!/usr/bin/env bash
# Entry point for newcomers and CI:
#   ./run.sh demo   install what is needed, start a VictoriaMetrics with sample CNPG series, print a decision
#   ./run.sh test   run every check and test suite (what CI runs)
set -euo pipefail
cd "$(dirname "$0")"
export COZY_TOOLS="${COZY_TOOLS:-$HOME/.cache/cozy-autoscaling}"
mkdir -p "$COZY_TOOLS"

suites() { ls -d tests/*/ 2>/dev/null | xargs -rn1 basename | grep -vx lib || true; }

setup() {
  tests/lib/setup.sh
  for s in $(suites); do
    if [[ -x tests/$s/setup.sh ]]; then echo "== setup $s"; "tests/$s/setup.sh"; fi
  done
}

case "${1:-}" in
  demo)
    tests/lib/setup.sh
    cargo build --quiet -p scaler
    exec tests/lib/demo.sh
    ;;
  test)
    setup
    echo "== rust: fmt, clippy, unit tests"
    cargo fmt --all --check
    cargo clippy --workspace --all-targets --quiet -- -D warnings
    cargo test --workspace --quiet
    cargo build --workspace --quiet
    for s in ${SUITES:-$(suites)}; do
      if [[ -x tests/$s/run.sh ]]; then echo "== suite $s"; "tests/$s/run.sh"; fi
    done
    echo "== all tests passed"
    ;;
  *)
    sed -n '2,4p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
