#!/usr/bin/env bash
# Installs what `./run.sh image` needs, idempotently: Debian's buildah (builds the Containerfile
# with no daemon and no registry) and ca-certificates (the bundle the image ships).
set -euo pipefail
# shellcheck source=tests/lib/apt.sh
. "$(dirname "$0")/../lib/apt.sh"
apt_install buildah=buildah ca-certificates=/etc/ssl/certs/ca-certificates.crt
