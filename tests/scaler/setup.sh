#!/usr/bin/env bash
# Extra tools of the scaler suite (idempotent): the openssl command issues the TLS test
# certificates. VictoriaMetrics and the Python venv come from tests/lib/setup.sh.
set -euo pipefail
if ! command -v openssl >/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends openssl >/dev/null
fi
