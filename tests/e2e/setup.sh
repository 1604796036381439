#!/usr/bin/env bash
# Builds the end-to-end components from the Go module proxy into the content-addressed build cache
# (tests/lib/gobuild.sh) and links them into $COZY_TOOLS/e2e/bin as NAME-VERSION. Each component has
# its own small module under tools/ (upstream `replace` lines repeated with published versions)
# because they pin different k8s.io versions. KEDA's operator and adapter, kube-apiserver and
# kube-controller-manager each share one `go build`.
# E2E_KEYS_ONLY=1 prints each build's cache key and builds nothing (tests/lib/check-setup.sh).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=tests/lib/versions.sh
. "$HERE/../lib/versions.sh"
: "${COZY_TOOLS:=$HOME/.cache/cozy-autoscaling}"
BIN="$COZY_TOOLS/e2e/bin"
KEYS_ONLY=${E2E_KEYS_ONLY:-}
# shellcheck source=tests/lib/gobuild.sh
. "$HERE/../lib/gobuild.sh"

build "$ETCD_VERSION" "$HERE/tools/etcd" "" etcd=cozy.local/e2e/tools/etcd
build "$KUBE_VERSION" "$HERE/tools/kube" "$(kube_ldflags "$KUBE_VERSION")" \
  kube-apiserver=k8s.io/kubernetes/cmd/kube-apiserver \
  kube-controller-manager=k8s.io/kubernetes/cmd/kube-controller-manager
build "$KEDA_VERSION" "$HERE/tools/keda" "" \
  keda-operator=github.com/kedacore/keda/v2/cmd/operator \
  keda-adapter=github.com/kedacore/keda/v2/cmd/adapter
build "$HELM_CONTROLLER_VERSION" "$HERE/tools/flux" "" helm-controller=github.com/fluxcd/helm-controller
