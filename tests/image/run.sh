#!/usr/bin/env bash
# image suite: builds the release image with `./run.sh image` (static release build, cached in
# target/<host>/release; buildah, no registry) and checks the OCI archive itself: config, labels,
# exact layer contents, size budget, and the binary taken out of it running on its own.
# Extra pytest arguments pass through, e.g. tests/image/run.sh -k layer
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here/../.."
. tests/lib/pytest.sh
start=$SECONDS
./run.sh image
echo "-- image built in $((SECONDS - start)) s"
run_pytest "$here" "$@"
