#!/usr/bin/env bash
# Builds the end-to-end components from the Go module proxy and links them into $COZY_TOOLS/e2e/bin
# as NAME-VERSION. The binaries live in a content-addressed cache, $COZY_BUILD_CACHE (default
# ~/.cache/cozy-autoscaling-builds, outside $COZY_TOOLS, so CI's fresh tools directory still reuses
# them): one directory per build, keyed by the component, its version, the packages, the build
# flags, the Go toolchain and the tools module's go.mod/go.sum, so any change to those rebuilds.
# Each component has its own small module under tools/ (upstream `replace` lines repeated with
# published versions) because they pin different k8s.io versions. Binaries built from one module
# share one `go build` (KEDA's operator and adapter, kube-apiserver and kube-controller-manager), so
# their common packages compile once. Builds run one at a time, niced: the machine may be shared.
# E2E_KEYS_ONLY=1 prints each build's cache key and builds nothing (tests/lib/check-setup.sh).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=tests/lib/versions.sh
. "$HERE/../lib/versions.sh"
: "${COZY_TOOLS:=$HOME/.cache/cozy-autoscaling}"
: "${COZY_BUILD_CACHE:=$HOME/.cache/cozy-autoscaling-builds}"
BIN="$COZY_TOOLS/e2e/bin"
mkdir -p "$BIN" "$COZY_BUILD_CACHE"
# Several checkouts (engineers, CI) share the cache: one setup builds, the others wait for it.
if [[ ${E2E_KEYS_ONLY:-} != 1 ]]; then
  exec 9>"$COZY_BUILD_CACHE/.lock"
  flock 9
fi
TIMES="$COZY_BUILD_CACHE/build-times.log"

# shellcheck source=tests/lib/go.sh
. "$HERE/../lib/go.sh"

# Reproducible, smaller binaries: no build paths, no symbol or DWARF tables (shorter links).
FLAGS=(-trimpath)
BASE_LDFLAGS="-s -w"

# build_key VERSION MODULE_DIR LDFLAGS PACKAGE...: the cache key of one build.
build_key() {
  local version=$1 dir=$2 ldflags=$3
  shift 3
  {
    printf '%s\n' "$version" "$*" "${FLAGS[*]}" "$ldflags" "$(go env GOVERSION GOOS GOARCH)" "CGO_ENABLED=0"
    cat "$HERE/tools/$dir/go.mod" "$HERE/tools/$dir/go.sum"
  } | sha256sum | cut -c1-16
}

# build VERSION MODULE_DIR LDFLAGS NAME=PACKAGE...: one `go build` of every PACKAGE inside
# tools/MODULE_DIR, each linked as $BIN/NAME-VERSION.
build() {
  local version=$1 dir=$2 ldflags="$BASE_LDFLAGS $3"
  shift 3
  local names=() pkgs=() pair
  for pair in "$@"; do names+=("${pair%%=*}"); pkgs+=("${pair#*=}"); done
  local key out
  key=$(build_key "$version" "$dir" "$ldflags" "${pkgs[@]}")
  if [[ ${E2E_KEYS_ONLY:-} == 1 ]]; then echo "${names[*]} $key"; return; fi
  out="$COZY_BUILD_CACHE/${names[0]}-$version-$key"
  if [[ ! -f "$out/.complete" ]]; then
    echo "e2e setup: building ${names[*]} $version (cache key $key); a cold build takes minutes" >&2
    local start=$SECONDS
    rm -rf "$out.tmp" && mkdir -p "$out.tmp"
    # `go build -o DIR/` names each binary after its package's last path element.
    if ! (cd "$HERE/tools/$dir" && CGO_ENABLED=0 nice -n 10 go build "${FLAGS[@]}" -ldflags "$ldflags" -o "$out.tmp/" "${pkgs[@]}"); then
      echo "e2e setup: FAILED to build ${names[*]} $version (see the go output above)" >&2
      rm -rf "$out.tmp"
      return 1
    fi
    local i
    for i in "${!names[@]}"; do
      [[ ${pkgs[i]##*/} == "${names[i]}" ]] || mv "$out.tmp/${pkgs[i]##*/}" "$out.tmp/${names[i]}"
    done
    touch "$out.tmp/.complete"
    rm -rf "$out" && mv "$out.tmp" "$out"
    printf '%s\t%s\t%s\t%ss\t%s\n' "$(date -u +%FT%TZ)" "${names[*]}" "$version" "$((SECONDS - start))" "$(go env GOVERSION)" | tee -a "$TIMES" >&2
  fi
  local name
  for name in "${names[@]}"; do ln -sfn "$out/$name" "$BIN/$name-$version"; done
}

build "$ETCD_VERSION" etcd "" etcd=cozy.local/e2e/tools/etcd
# Upstream's release build stamps the version; without it /version says v0.0.0-master+$Format:%H$,
# which clients (helm's Capabilities.KubeVersion, KEDA) cannot parse.
minor=${KUBE_VERSION#v1.}; minor=${minor%%.*}
kube_ldflags=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  kube_ldflags+=" -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
  kube_ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done
build "$KUBE_VERSION" kube "$kube_ldflags" \
  kube-apiserver=k8s.io/kubernetes/cmd/kube-apiserver \
  kube-controller-manager=k8s.io/kubernetes/cmd/kube-controller-manager
build "$KEDA_VERSION" keda "" \
  keda-operator=github.com/kedacore/keda/v2/cmd/operator \
  keda-adapter=github.com/kedacore/keda/v2/cmd/adapter
build "$HELM_CONTROLLER_VERSION" flux "" helm-controller=github.com/fluxcd/helm-controller
