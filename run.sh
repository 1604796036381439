#!/usr/bin/env bash
# Entry point for newcomers and CI:
#   ./run.sh demo   install what is needed, start a VictoriaMetrics with sample CNPG series, print a decision
#   ./run.sh test   run every check and test suite (what CI runs)
#   ./run.sh image  build the release image into target/image/*.oci.tar with buildah, no registry
#                   (--inputs-only: stop after staging the static binary; docs/image.md)
set -euo pipefail
cd "$(dirname "$0")"

# `./run.sh test` under CI (CI=true) or COZY_FRESH_TOOLS=1 installs every tool from scratch into a
# new, empty tools directory, with Go's module and build caches inside it and no pip download cache,
# so each run proves the cold setup paths a new machine takes. Only the content-addressed cache of
# the Go-built e2e binaries ($COZY_BUILD_CACHE, tests/e2e/setup.sh) is reused: rebuilding them
# costs most of an hour. Nested commands (the image suite's `./run.sh image`) inherit the directory.
# On exit: stop what runs in the background, then remove a fresh tools directory.
background=() fresh_tools=
on_exit() {
  ((${#background[@]} == 0)) || kill_tree "${background[@]}"
  # Go's module cache is read-only.
  [[ -z $fresh_tools ]] || { chmod -R u+w "$fresh_tools" 2>/dev/null; rm -rf "$fresh_tools"; }
}
trap on_exit EXIT
if [[ ${1:-} == test && (${CI:-} == true || ${COZY_FRESH_TOOLS:-} == 1) ]]; then
  COZY_TOOLS=$(mktemp -d "${TMPDIR:-/tmp}/cozy-tools.XXXXXX")
  export GOCACHE="$COZY_TOOLS/go/cache" GOMODCACHE="$COZY_TOOLS/go/mod" PIP_NO_CACHE_DIR=1 COZY_FRESH_TOOLS=1
  fresh_tools=$COZY_TOOLS
  echo "== fresh tools directory $COZY_TOOLS"
fi
export COZY_TOOLS="${COZY_TOOLS:-$HOME/.cache/cozy-autoscaling}"
mkdir -p "$COZY_TOOLS"

suites() {
  local d
  for d in tests/*/; do
    d=${d%/} d=${d#tests/}
    [[ $d == lib ]] || echo "$d"
  done
}

setup() {
  echo "== setup lib"
  tests/lib/setup.sh
  for s in $(suites); do
    if [[ -x tests/$s/setup.sh ]]; then echo "== setup $s"; "tests/$s/setup.sh"; fi
  done
}

# Every shell script of the repository, with the files they source.
shell_scripts() { git ls-files '*.sh' run.sh .ci/run; }

# Stops processes and everything they started (a suite's databases and servers).
kill_tree() {
  local p
  for p in "$@"; do
    # shellcheck disable=SC2046 # one pid per word
    kill_tree $(pgrep -P "$p")
    kill "$p" 2>/dev/null || true
  done
}

# The static release binaries and CA bundle under target/image/, then (unless --inputs-only) the
# Containerfile built by buildah into an OCI archive. Version and repository come from the chart
# chartgen generated, so the archive is the image the chart of this commit names.
release_build() {
  RUSTFLAGS="-C target-feature=+crt-static" cargo build --release --locked --quiet --target "$1" -p cli -p chartgen
}

image() {
  [[ -z ${1:-} || $1 == --inputs-only ]] || { echo "usage: ./run.sh image [--inputs-only]" >&2; exit 2; }
  tests/image/setup.sh
  # COZY_IMAGE_DIR: another staging directory, for a suite that builds the image beside the image
  # suite (the node suite).
  local host out=${COZY_IMAGE_DIR:-target/image} chart=charts/cozy-autoscaling
  host=$(rustc -vV | sed -n 's/^host: //p')
  # crt-static links glibc in (every dependency is Rust or ring's C); --target keeps these flags
  # off build scripts and proc macros. The clone's own target/ caches it: a target dir shared by
  # several checkouts would hand one checkout another's binary (docs/image.md).
  echo "== release build (static, $host)"
  release_build "$host"
  rm -rf "$out" && mkdir -p "$out"
  install -m 0555 "${CARGO_TARGET_DIR:-target}/$host/release/scaler" "$out/scaler"
  install -m 0555 "${CARGO_TARGET_DIR:-target}/$host/release/chartgen" "$out/chartgen"
  install -m 0444 /etc/ssl/certs/ca-certificates.crt "$out/ca-certificates.crt"
  # The licences the image's contents come under: this project's, and the notice DejaVu Sans (compiled
  # into scaler for the backtest's PNG) must travel with every copy, taken from the crate cargo used.
  local font
  font=$(cargo metadata --format-version 1 --locked | python3 -c \
    'import json, sys; print(next(p["manifest_path"] for p in json.load(sys.stdin)["packages"] if p["name"] == "dejavu"))')
  install -D -m 0444 LICENSE "$out/licenses/LICENSE"
  install -m 0444 "$(dirname "$font")"/assets/dejavu-fonts-ttf-*/LICENSE "$out/licenses/DejaVu-fonts-LICENSE"

  local version repository revision epoch
  version=$("$out/scaler" --version | awk '{print $2}')
  repository=$(sed -n 's/^  repository: //p' "$chart/values.yaml")
  # chartgen writes it plain (appVersion: 0.1.0); a hand-quoted one is the same string.
  if [[ $(sed -n 's/^appVersion: "\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$chart/Chart.yaml") != "$version" ]]; then
    echo "scaler $version is not $chart's appVersion: run 'cargo run -q -p chartgen -- package'" >&2
    exit 1
  fi
  revision=$(git rev-parse HEAD)
  git diff --quiet HEAD || revision="$revision-dirty"
  epoch=$(git log -1 --format=%ct)
  local args=(--build-arg "VERSION=$version" --build-arg "REVISION=$revision" --build-arg "STAGE=$out")
  if [[ ${1:-} == --inputs-only ]]; then
    echo "staged $out/; build with: -f Containerfile ${args[*]} --timestamp $epoch -t $repository:$version ."
    return
  fi

  echo "== buildah build $repository:$version"
  local archive="$out/cozy-autoscaling-$version.oci.tar" storage
  storage=$(mktemp -d "$PWD/$out/storage.XXXXXX")
  # Private vfs storage (no overlay, no daemon) and chroot isolation: works as root anywhere.
  buildah --storage-driver vfs --root "$storage/root" --runroot "$storage/run" build --quiet \
    --isolation chroot --timestamp "$epoch" --identity-label=false --disable-compression=false \
    "${args[@]}" -f Containerfile -t "oci-archive:$archive:$version" . >/dev/null
  rm -rf "$storage"
  echo "$archive ($(du -k "$archive" | cut -f1) KiB) = $repository:$version, revision $revision"
}

case "${1:-}" in
  demo)
    tests/lib/setup.sh
    cargo build --quiet -p cli
    exec tests/lib/demo.sh
    ;;
  image)
    image "${2:-}"
    ;;
  test)
    start=$SECONDS
    setup
    if [[ ${COZY_FRESH_TOOLS:-} == 1 ]]; then
      # The warm path, right after the cold one: every setup is idempotent.
      echo "== setup again (warm: nothing to install)"
      setup >/dev/null
      tests/lib/check-setup.sh
    fi
    echo "== setup took $((SECONDS - start)) s"
    echo "== shellcheck"
    shell_scripts | xargs shellcheck -x -S style
    echo "== rust: fmt, clippy, unit tests"
    step=$SECONDS
    cargo fmt --all --check
    cargo clippy --workspace --all-targets --quiet -- -D warnings
    cargo test --workspace --quiet
    cargo build --workspace --quiet
    echo "== rust took $((SECONDS - step)) s"
    # Returns the suite's status itself: errexit does not apply inside a function called from `||`.
    suite() {
      echo "== suite $1"
      local t=$SECONDS rc=0
      "tests/$1/run.sh" || rc=$?
      echo "== suite $1 $( ((rc == 0)) && echo took || echo "FAILED after") $((SECONDS - t)) s"
      return "$rc"
    }
    # The live database suites mostly wait on their databases, and the image's static release build
    # is CPU work the e2e suite's waiting leaves idle: both run beside the other suites (the build at
    # the lowest priority, so the timed suites keep the CPU), which takes minutes off the command
    # (docs/testing.md). The real node does not: its PostgreSQL clones beside the e2e suite made
    # helm-controller's 20 s waits there time out. Beside-suites' output is printed when the
    # command reaches them.
    # shellcheck disable=SC2086 # one suite per word
    selected=" $(printf '%s ' ${SUITES:-$(suites)})" beside=() logs=target/suite-logs
    rm -rf "$logs" && mkdir -p "$logs"
    for s in livepg liveredis; do
      if [[ $selected == *" $s "* && -x tests/$s/run.sh ]]; then beside+=("$s") selected=${selected/ $s / }; fi
    done
    if ((${#beside[@]})); then
      (for s in "${beside[@]}"; do suite "$s" >"$logs/$s.log" 2>&1 || exit; done) &
      background+=($!)
    fi
    if [[ $selected == *" image "* ]]; then
      host=$(rustc -vV | sed -n 's/^host: //p')
      (nice -n 19 bash -c "$(declare -f release_build); release_build $host" >"$logs/release-build.log" 2>&1 || true) &
      background+=($!)
    fi
    for s in $selected; do
      if [[ -x tests/$s/run.sh ]]; then suite "$s"; fi
    done
    if ((${#beside[@]})); then
      status=0
      wait "${background[0]}" || status=$?
      for s in "${beside[@]}"; do if [[ -f $logs/$s.log ]]; then cat "$logs/$s.log"; fi; done
      ((status == 0)) || { echo "== a suite beside the others failed (output above)" >&2; exit "$status"; }
    fi
    echo "== all tests passed in $((SECONDS - start)) s"
    ;;
  *)
    sed -n '2,6p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
