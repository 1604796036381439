#!/usr/bin/env bash
# Builds the real node's Go components from the module proxy into the content-addressed build cache
# (tests/lib/gobuild.sh), linked into $COZY_TOOLS/node/bin as NAME-VERSION: kubelet, kube-scheduler
# and kube-proxy from the same k8s.io/kubernetes as the e2e rig's apiserver (their own tools module,
# so the apiserver's cache entry keeps its key), and CoreDNS. Installs the node's Debian packages.
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
  # The container runtime, the CNI plugins and the netns' packet filter.
  apt_install containerd=containerd runc=runc containernetworking-plugins=/usr/lib/cni/bridge \
    iptables=iptables conntrack=conntrack
fi

build "$KUBE_VERSION" "$HERE/tools/kube" "$(kube_ldflags "$KUBE_VERSION")" \
  kubelet=k8s.io/kubernetes/cmd/kubelet \
  kube-scheduler=k8s.io/kubernetes/cmd/kube-scheduler \
  kube-proxy=k8s.io/kubernetes/cmd/kube-proxy
build "$COREDNS_VERSION" "$HERE/tools/coredns" "" coredns=github.com/coredns/coredns
# The pod sandbox's pause process and the test workload, for images built by the rig; their sources
# live here, so their hash is the version (the key covers only go.mod/go.sum of a module).
podbin_version=src-$(cat "$HERE"/tools/podbin/*/*.go | sha256sum | cut -c1-12)
build "$podbin_version" "$HERE/tools/podbin" "" \
  pause=cozy.local/node/tools/podbin/pause probe=cozy.local/node/tools/podbin/probe

