#!/bin/sh
# mmdebstrap customize hook for the PostgreSQL image ($1: the root file system being built).
# CloudNativePG runs PostgreSQL as uid/gid 26 (spec.postgresUID/postgresGID) and initdb refuses a
# uid without a passwd entry: give Debian's postgres account those ids, and its files with them.
set -eu
root=$1
old_uid=$(chroot "$root" id -u postgres)
old_gid=$(chroot "$root" id -g postgres)
sed -i "s/^postgres:x:$old_uid:$old_gid:/postgres:x:26:26:/" "$root/etc/passwd"
sed -i "s/^postgres:x:$old_gid:/postgres:x:26:/" "$root/etc/group"
chroot "$root" find / -xdev \( -uid "$old_uid" -o -gid "$old_gid" \) -exec chown -h 26:26 {} +
# The cluster Debian's postinst created; CNPG runs initdb into its own PGDATA.
rm -rf "$root/var/lib/postgresql/15" "$root/etc/postgresql/15"
# What CNPG's instances never use, to keep the image (and each run's copy of it) small: LLVM for the
# JIT (PostgreSQL runs without it when llvmjit.so is absent), its z3 dependency, locale sources.
rm -rf "$root"/usr/lib/x86_64-linux-gnu/libLLVM-* "$root"/usr/lib/x86_64-linux-gnu/libz3.so.* \
  "$root"/usr/lib/postgresql/15/lib/llvmjit* "$root"/usr/lib/postgresql/15/lib/bitcode \
  "$root"/usr/share/i18n
