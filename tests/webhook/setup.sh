#!/usr/bin/env bash
# Tools for the webhook suite, installed idempotently into the shared venv ($COZY_TOOLS/venv,
# created by tests/lib/setup.sh): kmock (in-memory Kubernetes API emulator, the stopgap until a
# real kube-apiserver is available), aiohttp (emulator.py's own handlers) and httpx (async HTTPS
# client for the benchmark). The chartgen suite's dashboard test runs the same emulator, so its
# run.sh calls this too. Test certificates come from the openssl CLI (tests/lib/setup.sh).
set -euo pipefail
: "${COZY_TOOLS:=$HOME/.cache/cozy-autoscaling}"
PY="$COZY_TOOLS/venv/bin/python"
if ! "$PY" -c 'import kmock, aiohttp, httpx, jsonpatch, requests, pytest' 2>/dev/null; then
  "$COZY_TOOLS/venv/bin/pip" install -q --disable-pip-version-check kmock aiohttp httpx jsonpatch requests pytest
fi
