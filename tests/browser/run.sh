#!/usr/bin/env bash
# Browser-side tests of pushgate:
#   1. unit tests of static/pushgate.js and the dashboard's metrics code (node --test);
#   2. end-to-end tests of the demo page and the dashboard in Debian's Chromium,
#      driven by playwright-core, against the real gateway binary.
#
# Installs what is missing (Chromium through apt, playwright-core through npm ci;
# playwright never downloads a browser), builds the binary, runs both suites and
# exits non-zero if either fails. Non-interactive: fine under CI=true with no stdin.
#
# Environment: E2E_PUSHGATE_BIN (a prebuilt binary; skips cargo build), E2E_KEEP_LOGS=1
# (keep each gateway log in its /tmp/pushgate-e2e-* directory),
# CHROMIUM_PATH (default /usr/bin/chromium), E2E_REFRESH_SCREENSHOTS=1 (write the
# screenshots to static/screenshots/, the committed ones README shows; otherwise
# they go to $TMPDIR/pushgate-e2e-screenshots/ and the tree stays clean).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
export DEBIAN_FRONTEND=noninteractive
export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1
export CHROMIUM_PATH="${CHROMIUM_PATH:-/usr/bin/chromium}"

step() { printf '\n==> %s\n' "$*"; }

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo -n "$@"; fi
}

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "node (>= 20) and npm are required" >&2
  exit 1
fi

if [ ! -x "$CHROMIUM_PATH" ]; then
  step "installing chromium"
  as_root apt-get update </dev/null
  as_root apt-get install -y --no-install-recommends chromium </dev/null
fi

cd "$here"
# npm ci unless node_modules already holds exactly the locked playwright-core.
locked="$(node -p "require('./package-lock.json').packages['node_modules/playwright-core'].version")"
installed="$(node -p "try { require('./node_modules/playwright-core/package.json').version } catch { '' }")"
if [ "$locked" != "$installed" ]; then
  step "installing playwright-core $locked (npm ci)"
  npm ci --no-audit --no-fund --loglevel=error </dev/null
fi

if [ -z "${E2E_PUSHGATE_BIN:-}" ]; then
  step "building the gateway (cargo build)"
  (cd "$repo" && cargo build --bin pushgate </dev/null)
  export E2E_PUSHGATE_BIN="${CARGO_TARGET_DIR:-$repo/target}/debug/pushgate"
fi

status=0
step "unit tests"
node --test unit/*.test.mjs </dev/null || status=1

step "end-to-end tests (chromium)"
node --test --test-concurrency=1 e2e/*.test.mjs </dev/null || status=1

if [ "$status" -ne 0 ]; then
  step "FAILED"
else
  step "all browser tests passed"
fi
exit "$status"
