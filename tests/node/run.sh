#!/usr/bin/env bash
# Real-node suite: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, a kubelet with
# containerd, runc and CNI, kube-proxy and CoreDNS, inside a network namespace the suite creates and
# removes (docs/e2e.md, "Real node"). Needs root. Runs standalone (installs/builds what is missing;
# cold builds take a while) and as a suite of ./run.sh test. Extra pytest arguments pass through.
# NODE_KEEP=1 keeps the process logs of a passing run (a failing run always keeps them).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here/../.."
. tests/lib/pytest.sh
[[ -x "$COZY_TOOLS/venv/bin/python" ]] || tests/lib/setup.sh
[[ -x "$COZY_TOOLS/helm4/helm" ]] || tests/chartgen/setup.sh
tests/e2e/setup.sh
"$here/setup.sh"
# The fixtures run chartgen and the scaler CLI from the debug build (the Rust step of ./run.sh test makes it).
cargo build --quiet -p cli -p chartgen
# The package's image, run as pods (test_3_package.py): the image suite's, staged apart because
# ./run.sh test runs this suite beside the others.
export COZY_IMAGE_DIR=target/node-image
./run.sh image >/dev/null
run_pytest "$here" -rs --durations=10 "$@"
