#!/usr/bin/env bash
# Builds the real node's Go components from the module proxy into the content-addressed build cache
# (tests/lib/gobuild.sh), linked into $COZY_TOOLS/node/bin as NAME-VERSION: kubelet, kube-scheduler
# and kube-proxy from the same k8s.io/kubernetes as the e2e rig's apiserver (their own tools module,
# so the apiserver's cache entry keeps its key), CoreDNS, the CloudNativePG and Redis operators and
# cert-manager. Installs the node's Debian packages.
# The e2e setup provides etcd, kube-apiserver and kube-controller-manager.
# NODE_KEYS_ONLY=1 prints each build's cache key and builds nothing.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=tests/lib/versions.sh
. "$HERE/../lib/versions.sh"
: "${COZY_TOOLS:=$HOME/.cache/cozy-autoscaling}"
BIN="$COZY_TOOLS/node/bin"
KEYS_ONLY=${NODE_KEYS_ONLY:-}
# shellcheck source=tests/lib/gobuild.sh
. "$HERE/../lib/gobuild.sh"

if [[ $KEYS_ONLY != 1 ]]; then
  # shellcheck source=tests/lib/apt.sh
  . "$HERE/../lib/apt.sh"
  # The container runtime, the CNI plugins and the netns' packet filter; mmdebstrap builds images'
  # root file systems from Debian packages; psql talks to the CNPG instances.
  apt_install containerd=containerd runc=runc containernetworking-plugins=/usr/lib/cni/bridge \
    iptables=iptables conntrack=conntrack mmdebstrap=mmdebstrap \
    postgresql-client-15=/usr/lib/postgresql/15/bin/psql
fi

build "$KUBE_VERSION" "$HERE/tools/kube" "$(kube_ldflags "$KUBE_VERSION")" \
  kubelet=k8s.io/kubernetes/cmd/kubelet \
  kube-scheduler=k8s.io/kubernetes/cmd/kube-scheduler \
  kube-proxy=k8s.io/kubernetes/cmd/kube-proxy
build "$COREDNS_VERSION" "$HERE/tools/coredns" "" coredns=github.com/coredns/coredns
# The CloudNativePG operator (its image's /manager; instances run it as their instance manager).
build "$CNPG_OPERATOR_VERSION" "$HERE/tools/cnpg" "" cnpg-manager=github.com/cloudnative-pg/cloudnative-pg/cmd/manager
# The Redis operator whose RedisFailover CRD the suites pin (its image's entrypoint).
build "$REDIS_OPERATOR_VERSION" "$HERE/tools/redis-operator" "" \
  redis-operator=github.com/spotahome/redis-operator/cmd/redisoperator
# cert-manager's controller and cainjector: upstream's controllers from its root module under mains
# of ours (its own are in a nested module the proxy does not serve), so the version names both.
certmanager_version=$CERT_MANAGER_VERSION-src-$(cat "$HERE"/tools/certmanager/*/*.go | sha256sum | cut -c1-12)
build "$certmanager_version" "$HERE/tools/certmanager" "" \
  cert-manager-controller=cozy.local/node/tools/certmanager/controller \
  cert-manager-cainjector=cozy.local/node/tools/certmanager/cainjector
# The pod sandbox's pause process and the test workload, for images built by the rig; their sources
# live here, so their hash is the version (the key covers only go.mod/go.sum of a module).
podbin_version=src-$(cat "$HERE"/tools/podbin/*/*.go | sha256sum | cut -c1-12)
build "$podbin_version" "$HERE/tools/podbin" "" \
  pause=cozy.local/node/tools/podbin/pause probe=cozy.local/node/tools/podbin/probe

# rootfs NAME PACKAGES HOOK [SUITE]: a root file system tar of Debian SUITE (bookworm) with PACKAGES
# (comma separated) by mmdebstrap, then HOOK (a script given the root's path), cached like the Go
# builds by the recipe (suite, packages, hook, mmdebstrap version) and linked as
# $COZY_TOOLS/node/rootfs/NAME.tar.
rootfs() {
  local name=$1 packages=$2 hook=$3 suite=${4:-bookworm} key out
  key=$({ [[ $suite == bookworm ]] || echo "$suite"; printf '%s\n' "$packages" "$(mmdebstrap --version)"; cat "$hook"; } |
    sha256sum | cut -c1-16)
  if [[ $KEYS_ONLY == 1 ]]; then echo "rootfs-$name $key"; return; fi
  out="$COZY_BUILD_CACHE/rootfs-$name-$key"
  (
    exec 9>"$out.lock"
    flock 9
    [[ ! -f "$out/.complete" ]] || exit 0
    echo "setup: building the $name root file system with mmdebstrap (cache key $key)" >&2
    local start=$SECONDS
    rm -rf "$out.tmp" && mkdir -p "$out.tmp"
    # Documentation, manuals and translations are of no use in a container.
    nice -n 10 mmdebstrap --quiet --variant=apt --include="$packages" \
      --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
      --dpkgopt='path-exclude=/usr/share/locale/*' --customize-hook="$hook" \
      "$suite" "$out.tmp/rootfs.tar" >&2
    touch "$out.tmp/.complete"
    rm -rf "$out" && mv "$out.tmp" "$out"
    printf '%s\t%s\t%s\t%ss\t%s\n' "$(date -u +%FT%TZ)" "rootfs-$name" "$key" "$((SECONDS - start))" \
      "mmdebstrap $(mmdebstrap --version | awk '{print $2}')" | tee -a "$COZY_BUILD_CACHE/build-times.log" >&2
  )
  mkdir -p "$COZY_TOOLS/node/rootfs"
  ln -sfn "$out/rootfs.tar" "$COZY_TOOLS/node/rootfs/$name.tar"
}
# CloudNativePG's instances: PostgreSQL 15 from Debian (initdb, pg_ctl, postgres, pg_basebackup,
# pg_controldata, pg_rewind on PATH through the image's config, tests/node/noderig/cnpg.py).
rootfs postgresql "postgresql-15" "$HERE/images/postgres-hook.sh"
# CloudNativePG's Pooler pods: PgBouncer from Debian trixie (1.24): CNPG writes `auth_dbname`, which
# bookworm's 1.18 does not know (added in 1.19).
rootfs pgbouncer "pgbouncer" "$HERE/images/pgbouncer-hook.sh" trixie
# The redis-operator's pods: Redis and Sentinel 7.0 from Debian with redis-cli and the shell tools
# its probe and startup scripts run (sh, tr, cut, grep, head, hostname), and redis_exporter as the
# sidecar (the image's entrypoint; the operator gives the redis and sentinel containers commands).
rootfs redis "redis-server,redis-sentinel,redis-tools,prometheus-redis-exporter,hostname" "$HERE/images/redis-hook.sh"
