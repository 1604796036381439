# shellcheck shell=bash
# Sourced by setup scripts that build components from the Go module proxy into the content-addressed
# cache $COZY_BUILD_CACHE (default ~/.cache/cozy-autoscaling-builds, outside $COZY_TOOLS, so CI's
# fresh tools directory still reuses them): one directory per build, keyed by the component, its
# version, the packages, the build flags, the Go toolchain and the tools module's go.mod/go.sum, so
# any change to those rebuilds. Binaries built from one module share one `go build`, so their common
# packages compile once. Builds run niced: the machine may be shared. Several checkouts (engineers,
# CI) share the cache: one lock per entry, so a setup waits only for the entry it needs.
# The caller sets BIN (where NAME-VERSION links go) and may set KEYS_ONLY=1 (print each build's
# cache key, build nothing: tests/lib/check-setup.sh).
: "${COZY_BUILD_CACHE:=$HOME/.cache/cozy-autoscaling-builds}"
mkdir -p "$COZY_BUILD_CACHE"
# shellcheck source=tests/lib/go.sh
. "$(dirname "${BASH_SOURCE[0]}")/go.sh"

# Reproducible, smaller binaries: no build paths, no symbol or DWARF tables (shorter links).
FLAGS=(-trimpath)
BASE_LDFLAGS="-s -w"

# Upstream's release build stamps the version; without it /version says v0.0.0-master+$Format:%H$,
# which clients (helm's Capabilities.KubeVersion, KEDA, the kubelet's skew check) cannot parse.
# kube_ldflags VERSION: the -X flags of a Kubernetes component build.
kube_ldflags() {
  local minor=${1#v1.} flags="" pkg
  minor=${minor%%.*}
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    flags+=" -X $pkg.gitVersion=$1 -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    flags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  printf '%s' "$flags"
}

# build_key VERSION MODULE_DIR LDFLAGS PACKAGE...: the cache key of one build.
build_key() {
  local version=$1 dir=$2 ldflags=$3
  shift 3
  {
    printf '%s\n' "$version" "$*" "${FLAGS[*]}" "$ldflags" "$(go env GOVERSION GOOS GOARCH)" "CGO_ENABLED=0"
    cat "$dir/go.mod" "$dir/go.sum"
  } | sha256sum | cut -c1-16
}

# build VERSION MODULE_DIR LDFLAGS NAME=PACKAGE...: one `go build` of every PACKAGE inside the tools
# module MODULE_DIR, each linked as $BIN/NAME-VERSION.
build() {
  local version=$1 dir=$2 ldflags="$BASE_LDFLAGS $3"
  shift 3
  local names=() pkgs=() pair
  for pair in "$@"; do names+=("${pair%%=*}"); pkgs+=("${pair#*=}"); done
  local key out
  key=$(build_key "$version" "$dir" "$ldflags" "${pkgs[@]}")
  if [[ ${KEYS_ONLY:-} == 1 ]]; then echo "${names[*]} $key"; return; fi
  out="$COZY_BUILD_CACHE/${names[0]}-$version-$key"
  mkdir -p "$BIN"
  (
    exec 9>"$out.lock"
    flock 9
    [[ ! -f "$out/.complete" ]] || exit 0
    echo "setup: building ${names[*]} $version (cache key $key); a cold build takes minutes" >&2
    local start=$SECONDS
    rm -rf "$out.tmp" && mkdir -p "$out.tmp"
    # `go build -o DIR/` names each binary after its package's last path element.
    if ! (cd "$dir" && CGO_ENABLED=0 nice -n 10 go build "${FLAGS[@]}" -ldflags "$ldflags" -o "$out.tmp/" "${pkgs[@]}"); then
      echo "setup: FAILED to build ${names[*]} $version (see the go output above)" >&2
      rm -rf "$out.tmp"
      exit 1
    fi
    local i
    for i in "${!names[@]}"; do
      [[ ${pkgs[i]##*/} == "${names[i]}" ]] || mv "$out.tmp/${pkgs[i]##*/}" "$out.tmp/${names[i]}"
    done
    touch "$out.tmp/.complete"
    rm -rf "$out" && mv "$out.tmp" "$out"
    printf '%s\t%s\t%s\t%ss\t%s\n' "$(date -u +%FT%TZ)" "${names[*]}" "$version" "$((SECONDS - start))" \
      "$(go env GOVERSION)" | tee -a "$COZY_BUILD_CACHE/build-times.log" >&2
  )
  local name
  # Re-linked only when it changed: ln -sfn unlinks first, and a suite running beside this setup
  # (./run.sh test runs the node suite beside the e2e suite) must never see the link missing.
  for name in "${names[@]}"; do
    [[ $(readlink "$BIN/$name-$version") == "$out/$name" ]] || ln -sfn "$out/$name" "$BIN/$name-$version"
  done
}
