#!/usr/bin/env bash
# Starts a private pushgate on 127.0.0.1 for loadtest, set up for load
# runs as loadtest/measure.sh does: anonymous ?uid=, no push rate limit,
# no per-address connection limits (every client is 127.0.0.x), a private
# copy of the binary (a rebuild elsewhere does not change a run).
#
# Usage: start.sh [PREFIX]   (default: a new directory /tmp/pushgate-loadtest.XXXXXX)
# Prints `prefix <dir>`, `port <port>`, `pid <pid>`, `api_key <key>`.
# Stop it with stop.sh <dir> (by its pid file).
#   LOADTEST_PUSHGATE_BIN: the binary to copy (default target/release/pushgate,
#     or $CARGO_TARGET_DIR/release/pushgate). Not PUSHGATE_BIN: pushgate
#     reads every PUSHGATE_* variable as configuration.
#   PUSHGATE_* variables reach the gateway (configuration overrides).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
bin=${LOADTEST_PUSHGATE_BIN:-${CARGO_TARGET_DIR:-$root/target}/release/pushgate}
[[ -x $bin ]] || { echo "start: no pushgate binary at $bin (cargo build --release --bin pushgate)" >&2; exit 1; }

if [[ -n ${1:-} ]]; then
    prefix=$1
else
    prefix=$(mktemp -d /tmp/pushgate-loadtest.XXXXXX)
    # Ours: removed again if the server does not come up.
    trap '[[ -n ${started:-} ]] || rm -rf "$prefix"' EXIT
fi
mkdir -p "$prefix"
prefix=$(cd "$prefix" && pwd)
if [[ -s $prefix/pushgate.pid ]] && kill -0 "$(cat "$prefix/pushgate.pid")" 2>/dev/null; then
    echo "start: a pushgate already runs from $prefix (pid $(cat "$prefix/pushgate.pid"))" >&2
    exit 1
fi
cp "$bin" "$prefix/pushgate"
api_key="loadtest-api-key-not-for-production"

# Only what differs from pushgate's built-in defaults; the per-address
# limits are switched off when this build has them.
for per_ip in yes no; do
    {
        printf '[server]\nlisten = "127.0.0.1:0"\ndrain_timeout_secs = 1\ndrain_spread_secs = 0\n\n'
        printf '[auth]\nsecret = "loadtest-secret-not-for-production"\n'
        printf 'api_key = "%s"\nanonymous = true\n\n' "$api_key"
        printf '[session]\nmax_connections = 19800\n\n'
        printf '[limits]\npush_rate_per_sec = 0\n'
        if [[ $per_ip == yes ]]; then
            printf 'max_connections_per_ip = 0\nconnection_rate_per_ip = 0\n'
        fi
    } >"$prefix/gateway.toml"
    "$prefix/pushgate" check-config --config "$prefix/gateway.toml" >/dev/null 2>&1 && break
    if [[ $per_ip == no ]]; then
        echo "start: cannot write a configuration pushgate accepts:" >&2
        "$prefix/pushgate" check-config --config "$prefix/gateway.toml" >&2
        exit 1
    fi
done

PUSHGATE_LOG=${PUSHGATE_LOG:-info} \
    "$prefix/pushgate" --config "$prefix/gateway.toml" >"$prefix/pushgate.log" 2>&1 </dev/null &
pid=$!
echo "$pid" >"$prefix/pushgate.pid"

# Wait (at most 10 s) for its "serving" line.
addr=""
for _ in $(seq 1 100); do
    addr=$(grep -a "serving" "$prefix/pushgate.log" 2>/dev/null | grep -ao '127\.0\.0\.1:[0-9]\+' | head -n1 || true)
    [[ -n $addr ]] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
done
if [[ -z $addr ]]; then
    echo "start: pushgate did not start (see $prefix/pushgate.log)" >&2
    kill -TERM "$pid" 2>/dev/null || true
    exit 1
fi
started=yes
echo "prefix $prefix"
echo "port ${addr##*:}"
echo "pid $pid"
echo "api_key $api_key"
