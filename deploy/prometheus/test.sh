#!/usr/bin/env bash
# Checks the Prometheus rules in alerts.yml (`promtool check rules`) and
# runs their unit tests in alerts.test.yml (`promtool test rules`): every
# alert fires on a series that should page and stays quiet on the others.
#
# Uses `promtool` from PATH, or $PROMTOOL. When there is none, takes it out
# of Debian's `prometheus` package without installing the package (which
# would also install and, under systemd, start a Prometheus server): the
# .deb is fetched with `apt-get download` and unpacked into
# ${XDG_CACHE_HOME:-~/.cache}/pushgate/promtool, reused on later runs.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export DEBIAN_FRONTEND=noninteractive

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo -n "$@"; fi
}

promtool="${PROMTOOL:-$(command -v promtool || true)}"
if [ -z "$promtool" ]; then
  cache="${XDG_CACHE_HOME:-$HOME/.cache}/pushgate/promtool"
  promtool="$cache/usr/bin/promtool"
  if [ ! -x "$promtool" ]; then
    echo "promtool not found: unpacking it from Debian's prometheus package into $cache"
    work="$(mktemp -d)"
    trap 'rm -rf "$work"' EXIT
    if ! (cd "$work" && apt-get download prometheus </dev/null); then
      as_root apt-get update </dev/null
      (cd "$work" && apt-get download prometheus </dev/null)
    fi
    mkdir -p "$cache"
    dpkg-deb -x "$work"/prometheus_*.deb "$cache"
  fi
fi
"$promtool" --version 2>&1 | head -n 1

cd "$here"
"$promtool" check rules alerts.yml
"$promtool" test rules alerts.test.yml
