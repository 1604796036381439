#!/usr/bin/env bash
# Checks the setup the test command just ran into a fresh tools directory (run.sh, CI=true):
# everything the suites use is there, no script relies on a RETURN trap (one set in a function
# stays set after it returns and fires again elsewhere: the cold-cache bug of chartgen's setup),
# and apt-get waits for a lock another apt-get holds instead of failing at once.
set -euo pipefail
cd "$(dirname "$0")/../.."
: "${COZY_TOOLS:?run by ./run.sh test}"
# shellcheck source=tests/lib/versions.sh
. tests/lib/versions.sh
fail() { echo "check-setup: $*" >&2; exit 1; }

for f in venv/bin/python helm3/helm helm4/helm \
         "upstream/keda-$KEDA_VERSION" "upstream/cnpg-$CNPG_VERSION" "upstream/redis-operator-$REDIS_OPERATOR_VERSION" \
         "upstream/helm-controller-$HELM_CONTROLLER_VERSION" "upstream/source-controller-$SOURCE_CONTROLLER_VERSION" \
         "e2e/bin/etcd-$ETCD_VERSION" "e2e/bin/kube-apiserver-$KUBE_VERSION" "e2e/bin/kube-controller-manager-$KUBE_VERSION" \
         "e2e/bin/keda-operator-$KEDA_VERSION" "e2e/bin/keda-adapter-$KEDA_VERSION" "e2e/bin/helm-controller-$HELM_CONTROLLER_VERSION" \
         "node/bin/kubelet-$KUBE_VERSION" "node/bin/kube-scheduler-$KUBE_VERSION" "node/bin/kube-proxy-$KUBE_VERSION" \
         "node/bin/coredns-$COREDNS_VERSION" "node/bin/cnpg-manager-$CNPG_OPERATOR_VERSION" "node/rootfs/postgresql.tar" \
         "node/bin/redis-operator-$REDIS_OPERATOR_VERSION" "node/rootfs/pgbouncer.tar" "node/rootfs/redis.tar" \
         "upstream/cnpg-operator-$CNPG_OPERATOR_VERSION" "upstream/redis-operator-chart-$REDIS_OPERATOR_VERSION" \
         "upstream/cert-manager-$CERT_MANAGER_VERSION" "upstream/prometheus-operator-$PROMETHEUS_OPERATOR_VERSION"; do
  [[ -e "$COZY_TOOLS/$f" ]] || fail "$COZY_TOOLS/$f is missing after setup"
done
compgen -G "$COZY_TOOLS/grafana-check/*/grafana-check" >/dev/null || fail "grafana-check was not built"
for part in controller cainjector; do
  compgen -G "$COZY_TOOLS/node/bin/cert-manager-$part-$CERT_MANAGER_VERSION-src-*" >/dev/null ||
    fail "cert-manager's $part was not built"
done
"$COZY_TOOLS/helm3/helm" version --short | grep -q '^v3\.' || fail "helm3 is not Helm 3"
"$COZY_TOOLS/helm4/helm" version --short | grep -q '^v4\.' || fail "helm4 is not Helm 4"

if found=$(git grep -nE "^[[:space:]]*trap .* RETURN\b" -- '*.sh' run.sh .ci/run); then
  fail "a RETURN trap outlives its function; use a subshell with an EXIT trap: $found"
fi

# The e2e build cache's keys: each changes with its component's version, packages, build flags or
# tools module, and only that one. Mutations are made in a copy of the scripts and modules.
keys() { (cd "$1" && E2E_KEYS_ONLY=1 COZY_BUILD_CACHE="$1/cache" bash tests/e2e/setup.sh); }
copy=$(mktemp -d)
trap 'rm -rf "$copy"' EXIT
mkdir -p "$copy/tests/e2e" "$copy/tests/lib"
cp -r tests/e2e/setup.sh tests/e2e/tools "$copy/tests/e2e/"
cp tests/lib/versions.sh tests/lib/go.sh tests/lib/gobuild.sh "$copy/tests/lib/"
base=$(keys "$copy")
[[ $(wc -l <<<"$base") == 4 ]] || fail "expected four e2e builds, got: $base"
# mutate WHAT SED-SCRIPT FILE COMPONENT: after the edit exactly COMPONENT's key differs.
mutate() {
  local what=$1 script=$2 file=$3 component=$4 changed
  cp "$copy/$file" "$copy/$file.orig"
  sed -i "$script" "$copy/$file"
  cmp -s "$copy/$file" "$copy/$file.orig" && fail "mutation '$what' changed nothing in $file"
  changed=$({ diff <(echo "$base") <(keys "$copy") || true; } | sed -n 's/^> //p' | cut -d' ' -f1)
  mv "$copy/$file.orig" "$copy/$file"
  [[ $changed == "$component" ]] || fail "'$what' changed the keys of [${changed//$'\n'/ }], not [$component]"
}
mutate "KEDA version" 's/^KEDA_VERSION=.*/KEDA_VERSION=v9.9.9/' tests/lib/versions.sh keda-operator
mutate "etcd go.sum" '1s/^/# /' tests/e2e/tools/etcd/go.sum etcd
mutate "helm-controller go.mod" "\$a // changed" tests/e2e/tools/flux/go.mod helm-controller
mutate "build flags" 's/^FLAGS=(-trimpath)/FLAGS=(-trimpath -race)/' tests/lib/gobuild.sh etcd$'\n'kube-apiserver$'\n'keda-operator$'\n'helm-controller
mutate "kube ldflags" 's/gitTreeState=clean/gitTreeState=dirty/' tests/lib/gobuild.sh kube-apiserver
echo "check-setup: each e2e build key changes with its version, module, flags and only with them"

# Another apt-get holding the package lists' lock for 3 s: apt_get waits, then succeeds.
if [[ $(id -u) == 0 ]]; then
  # shellcheck source=tests/lib/apt.sh
  . tests/lib/apt.sh
  python3 -c 'import fcntl, sys, time
f = open("/var/lib/apt/lists/lock", "w"); fcntl.lockf(f, fcntl.LOCK_EX)
print("locked", flush=True); time.sleep(3)' | { read -r _; start=$SECONDS; APT_LOCK_WAIT=60 apt_get update; echo $((SECONDS - start)); } > "$COZY_TOOLS/apt-wait" ||
    fail "apt-get update failed while another process held the lists lock"
  (($(cat "$COZY_TOOLS/apt-wait") >= 2)) || fail "apt-get update did not wait for the held lock"
  echo "check-setup: apt-get waited $(cat "$COZY_TOOLS/apt-wait") s for a held lock, then succeeded"
fi
echo "check-setup: every tool in place"
