#!/bin/sh
# mmdebstrap customize hook for the Redis image of the redis-operator's pods ($1: the root file system).
# The operator runs every container as uid/gid 1000 and writes its own redis.conf and sentinel.conf:
# Debian's own instances (configs, logs, init scripts) are never used.
set -eu
root=$1
rm -rf "$root/etc/redis" "$root/etc/init.d/redis-server" "$root/etc/init.d/redis-sentinel" \
  "$root/var/log/redis" "$root/usr/share/locale"
