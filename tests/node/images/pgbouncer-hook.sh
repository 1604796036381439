#!/bin/sh
# mmdebstrap customize hook for the PgBouncer image of CNPG's Pooler pods ($1: the root file system).
# CNPG's pooler instance manager runs /usr/bin/pgbouncer (Debian installs it in /usr/sbin) as uid 998,
# gid 996 (pkg/specs/pgbouncer/deployments.go): give those ids an account, as CNPG's own image does.
set -eu
root=$1
ln -sfn /usr/sbin/pgbouncer "$root/usr/bin/pgbouncer"
echo "pgbouncer:x:996:" >>"$root/etc/group"
echo "pgbouncer:x:998:996:PgBouncer:/controller:/usr/sbin/nologin" >>"$root/etc/passwd"
# Debian's own instance (its config, logs, init script) is never used: the manager writes the config.
rm -rf "$root/etc/pgbouncer" "$root/etc/init.d/pgbouncer" "$root/usr/share/locale"
