# shellcheck shell=bash
# Sourced by setup scripts: apt_install PACKAGE[=PROBE]... installs, in one apt-get run, each Debian
# PACKAGE whose PROBE (a program name, or an absolute path that must exist) is missing, or, without a
# PROBE, that dpkg does not list as installed.

# apt_get ARGS...: apt-get, quiet and non-interactive, waiting up to APT_LOCK_WAIT seconds (300) for
# a lock another apt-get holds instead of failing at once. DPkg::Lock::Timeout covers the dpkg lock
# of `install`; `update` ignores it (apt 2.6 exits 100 on /var/lib/apt/lists/lock), so it is retried.
apt_get() {
  local wait=${APT_LOCK_WAIT:-300} sudo=() err
  local deadline=$((SECONDS + wait))
  [[ $(id -u) == 0 ]] || sudo=(sudo)
  while :; do
    if err=$("${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -qq -o "DPkg::Lock::Timeout=$wait" "$@" 2>&1 >/dev/null); then
      return 0
    fi
    if [[ $err == *"Could not get lock"* ]] && ((SECONDS < deadline)); then
      sleep 2
      continue
    fi
    printf 'apt-get %s failed:\n%s\n' "$*" "$err" >&2
    return 1
  done
}

apt_install() {
  local missing=() pair pkg probe
  for pair in "$@"; do
    pkg=${pair%%=*} probe=${pair#"$pkg"}
    probe=${probe#=}
    if [[ -z $probe ]]; then
      [[ $(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null) == "install ok installed" ]] && continue
    elif [[ $probe == /* ]]; then
      [[ -e $probe ]] && continue
    else
      command -v "$probe" >/dev/null && continue
    fi
    missing+=("$pkg")
  done
  ((${#missing[@]})) || return 0
  echo "setup: apt-get install ${missing[*]}" >&2
  apt_get update
  apt_get install -y --no-install-recommends "${missing[@]}"
}
