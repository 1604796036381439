#!/usr/bin/env bash
# Copies upstream data files the suites read (CRDs, CNPG's default monitoring queries) out of the Go
# module cache at the versions pinned in tests/lib/versions.sh, into $COZY_TOOLS/upstream/<name>-<version>,
# idempotently. Nothing is vendored into the repository; `go mod download` needs only the module proxy.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=tests/lib/versions.sh
. "$HERE/versions.sh"
: "${COZY_TOOLS:=$HOME/.cache/cozy-autoscaling}"
OUT="$COZY_TOOLS/upstream"
mkdir -p "$OUT"

# shellcheck source=tests/lib/go.sh
. "$HERE/go.sh"

# copy NAME MODULE VERSION PATH...: PATHs (files, directories or globs inside the module) into
# $OUT/NAME-VERSION.
copy() {
  local module=$2 version=$3 out="$OUT/$1-$3"
  shift 3
  if [[ -d "$out" ]]; then return 0; fi
  local dir
  # Outside any module, so no go.mod/go.sum is touched.
  dir=$(cd "${TMPDIR:-/tmp}" && go mod download -json "$module@$version" |
        "$COZY_TOOLS/venv/bin/python" -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
  rm -rf "$out.tmp" && mkdir -p "$out.tmp"
  local p
  for p in "$@"; do
    # shellcheck disable=SC2086 # the glob is meant to expand inside the module
    cp -r $dir/$p "$out.tmp/"
  done
  chmod -R u+w "$out.tmp"
  mv "$out.tmp" "$out"
}

copy keda github.com/kedacore/keda/v2 "$KEDA_VERSION" 'config/crd/bases/*.yaml'
copy helm-controller github.com/fluxcd/helm-controller "$HELM_CONTROLLER_VERSION" 'config/crd/bases/*.yaml'
copy source-controller github.com/fluxcd/source-controller "$SOURCE_CONTROLLER_VERSION" 'config/crd/bases/*.yaml'
copy cnpg github.com/cloudnative-pg/cloudnative-pg "$CNPG_VERSION" \
  config/crd/bases/postgresql.cnpg.io_clusters.yaml config/manager/default-monitoring.yaml
copy redis-operator github.com/spotahome/redis-operator "$REDIS_OPERATOR_VERSION" \
  manifests/databases.spotahome.com_redisfailovers.yaml
copy cert-manager github.com/cert-manager/cert-manager "$CERT_MANAGER_VERSION" 'deploy/crds/*.yaml'
copy prometheus-operator github.com/prometheus-operator/prometheus-operator "$PROMETHEUS_OPERATOR_VERSION" \
  example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml \
  example/prometheus-operator-crd/monitoring.coreos.com_prometheusrules.yaml
# Its own helm chart, which the real node installs it with.
copy redis-operator-chart github.com/spotahome/redis-operator "$REDIS_OPERATOR_VERSION" charts/redisoperator
# The operator's own manifests for the real node (tests/node/noderig/cnpg.py renders them).
copy cnpg-operator github.com/cloudnative-pg/cloudnative-pg "$CNPG_OPERATOR_VERSION" 'config/crd/bases/*.yaml' \
  config/rbac/role.yaml config/rbac/role_binding.yaml config/manager/manager.yaml \
  config/manager/default-monitoring.yaml config/webhook/manifests.yaml config/webhook/service.yaml
