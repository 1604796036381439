#!/usr/bin/env bash
# Installs the tools every suite shares into $COZY_TOOLS (outside the clone), idempotently:
# Debian packages and a Python venv with grpcio for the independent gRPC client.
set -euo pipefail
: "${COZY_TOOLS:=$HOME/.cache/cozy-autoscaling}"
mkdir -p "$COZY_TOOLS"

# Debian packages every suite shares: VictoriaMetrics (the package starts nothing by itself; tests
# start their own instance on loopback) and the openssl CLI (throwaway test CAs and certificates).
missing=()
command -v victoria-metrics >/dev/null || missing+=(victoria-metrics)
command -v openssl >/dev/null || missing+=(openssl)
if ((${#missing[@]})); then
  sudo=; [[ $(id -u) == 0 ]] || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [[ ! -x "$COZY_TOOLS/venv/bin/python" ]]; then
  python3 -m venv "$COZY_TOOLS/venv"
fi
"$COZY_TOOLS/venv/bin/pip" install -q --disable-pip-version-check \
  grpcio grpcio-tools grpcio-health-checking pytest requests pyyaml kubernetes-validate jsonschema jsonpatch \
  prometheus-client hypothesis

# Upstream CRDs and data files, from the Go module cache at pinned versions.
"$(dirname "$0")/upstream.sh"
