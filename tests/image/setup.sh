#!/usr/bin/env bash
# Installs what `./run.sh image` needs, idempotently: Debian's buildah (builds the Containerfile
# with no daemon and no registry) and ca-certificates (the bundle the image ships).
set -euo pipefail
missing=()
command -v buildah >/dev/null || missing+=(buildah)
[[ -f /etc/ssl/certs/ca-certificates.crt ]] || missing+=(ca-certificates)
if ((${#missing[@]})); then
  sudo=; [[ $(id -u) == 0 ]] || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
