#!/usr/bin/env bash
# Installs what the live Redis suite needs, idempotently: Debian's redis-server, redis-sentinel and
# prometheus-redis-exporter (the suite starts its own instances on loopback ports and never the
# packages' services).
set -euo pipefail
# shellcheck source=tests/lib/apt.sh
. "$(dirname "$0")/../lib/apt.sh"
apt_install redis-server=redis-server redis-sentinel=redis-sentinel \
  prometheus-redis-exporter=prometheus-redis-exporter
