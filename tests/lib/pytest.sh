# shellcheck shell=bash
# Sourced by the suites' run.sh: pytest from the shared venv ($COZY_TOOLS/venv, tests/lib/setup.sh).
: "${COZY_TOOLS:=$HOME/.cache/cozy-autoscaling}"
export COZY_TOOLS PYTHONDONTWRITEBYTECODE=1
# Every suite imports the shared test kit (tests/lib/testkit.py) by name.
PYTHONPATH="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONPATH
# kmock (webhook suite) ships a pytest plugin that fails to load without pytest-asyncio; no suite
# relies on autoloaded plugins, so none is loaded.
export PYTEST_DISABLE_PLUGIN_AUTOLOAD=1

# run_pytest ARGS...: replaces the shell with pytest (quiet, no cache dir in the clone).
run_pytest() {
  exec "$COZY_TOOLS/venv/bin/python" -m pytest -q -p no:cacheprovider "$@"
}
