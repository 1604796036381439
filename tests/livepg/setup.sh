#!/usr/bin/env bash
# Installs what the live PostgreSQL suite needs, idempotently: Debian's PostgreSQL server (its
# binaries are used from /usr/lib/postgresql/<ver>/bin; the suite starts its own instances and never
# the package's cluster), Debian's pgbouncer (test_pgbouncer.py starts its own, never the package's
# service) and the psycopg driver in the shared venv (for the exporter and the sessions).
set -euo pipefail
: "${COZY_TOOLS:=$HOME/.cache/cozy-autoscaling}"

have_server() {
  local b
  for b in /usr/lib/postgresql/*/bin; do
    [[ -x $b/postgres && -x $b/pg_basebackup && -x $b/initdb ]] && return 0
  done
  return 1
}
missing=()
# The postgresql package creates the `postgres` system user the servers (and PgBouncer) run as when
# the suite runs as root.
if ! have_server || ! getent passwd postgres >/dev/null; then
  missing+=(postgresql)
fi
[[ -x /usr/sbin/pgbouncer ]] || missing+=(pgbouncer)
if ((${#missing[@]})); then
  # shellcheck source=tests/lib/apt.sh
  . "$(dirname "$0")/../lib/apt.sh"
  apt_install "${missing[@]}"
fi
command -v setpriv >/dev/null || { echo "livepg setup: setpriv (util-linux) is missing" >&2; exit 1; }

"$COZY_TOOLS/venv/bin/pip" install -q --disable-pip-version-check "psycopg[binary]>=3.2"
