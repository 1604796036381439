#!/usr/bin/env bash
# Builds the end-to-end components from the Go module proxy into $COZY_TOOLS/e2e/bin (outside the
# clone), one binary per name and version, so a warm run skips every build. Each component has its
# own small module under tools/ (upstream `replace` lines repeated with published versions) because
# they pin different k8s.io versions. Builds run one at a time, niced: the machine is shared.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=tests/lib/versions.sh
. "$HERE/../lib/versions.sh"
: "${COZY_TOOLS:=$HOME/.cache/cozy-autoscaling}"
BIN="$COZY_TOOLS/e2e/bin"
mkdir -p "$BIN"
# Several checkouts (engineers, CI) share this cache: one setup builds, the others wait for it.
exec 9>"$BIN/.lock"
flock 9
TIMES="$COZY_TOOLS/e2e/build-times.log"

# shellcheck source=tests/lib/go.sh
. "$HERE/../lib/go.sh"

# build NAME VERSION MODULE_DIR PACKAGE [LDFLAGS]: go build PACKAGE inside tools/MODULE_DIR into
# $BIN/NAME-VERSION.
build() {
  local name=$1 version=$2 dir=$3 pkg=$4 ldflags=${5:-} out="$BIN/$1-$2"
  if [[ -x "$out" ]]; then return 0; fi
  echo "e2e setup: building $name $version ($pkg); cold builds take minutes" >&2
  local start=$SECONDS
  if ! (cd "$HERE/tools/$dir" && CGO_ENABLED=0 nice -n 10 go build -ldflags "$ldflags" -o "$out.tmp" "$pkg"); then
    echo "e2e setup: FAILED to build $name $version from $pkg (see the go output above)" >&2
    rm -f "$out.tmp"
    return 1
  fi
  mv "$out.tmp" "$out"
  printf '%s\t%s\t%s\t%ss\t%s\n' "$(date -u +%FT%TZ)" "$name" "$version" "$((SECONDS - start))" "$(go env GOVERSION)" | tee -a "$TIMES" >&2
}

build etcd "$ETCD_VERSION" etcd cozy.local/e2e/tools/etcd
# Upstream's release build stamps the version; without it /version says v0.0.0-master+$Format:%H$,
# which clients (helm's Capabilities.KubeVersion, KEDA) cannot parse.
minor=${KUBE_VERSION#v1.}; minor=${minor%%.*}
kube_ldflags=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  kube_ldflags+=" -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
  kube_ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done
build kube-apiserver "$KUBE_VERSION" kube k8s.io/kubernetes/cmd/kube-apiserver "$kube_ldflags"
build kube-controller-manager "$KUBE_VERSION" kube k8s.io/kubernetes/cmd/kube-controller-manager "$kube_ldflags"
build keda-operator "$KEDA_VERSION" keda github.com/kedacore/keda/v2/cmd/operator
build keda-adapter "$KEDA_VERSION" keda github.com/kedacore/keda/v2/cmd/adapter
build helm-controller "$HELM_CONTROLLER_VERSION" flux github.com/fluxcd/helm-controller
