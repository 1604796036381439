#!/usr/bin/env bash
# Installs the tools every suite shares into $COZY_TOOLS (outside the clone), idempotently:
# Debian packages and a Python venv with grpcio for the independent gRPC client.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
: "${COZY_TOOLS:=$HOME/.cache/cozy-autoscaling}"
mkdir -p "$COZY_TOOLS"

# Debian packages every suite shares: VictoriaMetrics (the package starts nothing by itself; tests
# start their own instance on loopback), the openssl CLI (throwaway test CAs and certificates) and
# the shell script linter the test command runs over every script of the repository.
# shellcheck source=tests/lib/apt.sh
. "$HERE/apt.sh"
apt_install victoria-metrics=victoria-metrics openssl=openssl shellcheck=shellcheck

if [[ ! -x "$COZY_TOOLS/venv/bin/python" ]]; then
  python3 -m venv "$COZY_TOOLS/venv"
fi
"$COZY_TOOLS/venv/bin/pip" install -q --disable-pip-version-check \
  grpcio grpcio-tools grpcio-health-checking pytest requests pyyaml kubernetes-validate jsonschema jsonpatch \
  prometheus-client hypothesis

# Upstream CRDs and data files, from the Go module cache at pinned versions.
"$HERE/upstream.sh"
