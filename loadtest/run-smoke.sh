#!/usr/bin/env bash
# Short smoke run of the load client against a fresh release pushgate.
#
# Builds both release binaries, starts pushgate on 127.0.0.1:<free port>
# (anonymous auth, every channel public, unlimited push rate, 3 s idle
# timeout), runs small scenarios with `--check` (counts only, never
# timings: no failed connections, every message delivered exactly once,
# per (connection, channel) where there are channels, every silent client
# evicted with 4001 and none early), stops the gateway by its pid, runs
# loadtest/auth-storm.sh's two steps at 200 clients (they bring their own
# nodes), and exits non-zero if anything failed.
#
# Usage: loadtest/run-smoke.sh            (from anywhere)
#   SMOKE_N=2000 sets the connection count of the larger steps.
set -euo pipefail
cd "$(dirname "$0")/.."

N=${SMOKE_N:-2000}
IDLE_SECS=3
started=$(date +%s)

# Built one at a time, so pushgate gets the same features (and binary) as a
# plain `cargo build --release`.
cargo build --release -p pushgate
cargo build --release -p loadtest
# Where cargo put them (CARGO_TARGET_DIR, when set, moves the target dir).
release="${CARGO_TARGET_DIR:-target}/release"

# shellcheck source=loadtest/gateway-config.sh
source loadtest/gateway-config.sh

work=$(mktemp -d)
gw_pid=""
cleanup() {
    if [[ -n "$gw_pid" ]] && kill -0 "$gw_pid" 2>/dev/null; then
        kill -TERM "$gw_pid" 2>/dev/null || true
        for _ in $(seq 1 50); do
            kill -0 "$gw_pid" 2>/dev/null || break
            sleep 0.2
        done
        kill -KILL "$gw_pid" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT

# Our own copy of the binary: others may rebuild target/release meanwhile.
cp "$release/pushgate" "$work/pushgate"
write_config "$work/gateway.toml" "$work/pushgate"
# Port 0: the kernel picks a free port; pushgate logs the address it got.
PUSHGATE_SESSION_IDLE_TIMEOUT_SECS=$IDLE_SECS \
PUSHGATE_SESSION_PING_INTERVAL_SECS=1 \
PUSHGATE_LOG=info \
    "$work/pushgate" --config "$work/gateway.toml" >"$work/gateway.log" 2>&1 &
gw_pid=$!

addr=""
for _ in $(seq 1 100); do
    addr=$(grep -a "serving" "$work/gateway.log" 2>/dev/null | grep -ao '127\.0\.0\.1:[0-9]\+' | head -n1 || true)
    [[ -n "$addr" ]] && break
    kill -0 "$gw_pid" 2>/dev/null || break
    sleep 0.1
done
if [[ -z "$addr" ]]; then
    echo "smoke: pushgate did not start:" >&2
    cat "$work/gateway.log" >&2
    exit 1
fi
echo "smoke: pushgate pid $gw_pid on $addr"

common=(
    --ws-url "ws://$addr/ws?uid={user}"
    --sse-url "http://$addr/sse?uid={user}"
    --poll-url "http://$addr/poll?uid={user}"
    --push-url "http://$addr/push"
    --metrics-url "http://$addr/metrics"
    --pid "$gw_pid"
    --timeout-secs 120
    --check
)

failed=()
step() {
    local name=$1
    shift
    echo
    echo "smoke: == $name: loadtest $*"
    if ! "$release/loadtest" "$@" "${common[@]}" --json "$work/$name.json"; then
        failed+=("$name")
    fi
}

step fanout fanout -n "$N" -m 20 -r 50
step churn churn -n "$N" -m 100 -r 50 --reconnect-min-ms 100 --reconnect-max-ms 800
step poll-fanout poll-fanout -n 1000 -m 3 -r 5
step sse-fanout sse-fanout -n 500 -m 10 -r 50
step personal personal -n 1000 -m 3 --batch 100
step mixed mixed --ws 500 --sse 250 --poll 250 -m 5 -r 20
step evict evict -n 500 --idle-timeout-secs "$IDLE_SECS" --margin-secs 15
# Channels (the gateway config makes every channel public): broadcast then
# channel pushes to 300 of 600; 2,000 channels of one subscriber each; churn
# in 5 channels each, resuming every (connection, channel) stream; idle in 10.
step channel-fanout channel-fanout -n 600 --members 300 -m 5 -r 20
step channel-many-small fanout -n 500 --channels 2000 --channel-layout stripe -m 2000 -r 1000 --push-conns 8
step channel-churn churn -n 300 -m 60 -r 30 --reconnect-min-ms 100 --reconnect-max-ms 800 \
    --channels 100 --channels-per-conn 5 --broadcast-every 4 --channels-per-push 2
step channel-idle idle -n 300 --hold-secs 1 --release-secs 0 --channels 100 --channels-per-conn 10

if ! kill -0 "$gw_pid" 2>/dev/null; then
    echo "smoke: pushgate died during the run:" >&2
    tail -n 20 "$work/gateway.log" >&2
    failed+=("gateway-alive")
fi

# The reconnect storms with authentication (auth-storm.sh) at 200
# clients: they need two nodes on the Redis at 127.0.0.1:6379, which CI
# has (elsewhere, without it, they are skipped). Results in $work only.
echo
if [[ $(redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null) == PONG ]]; then
    echo "smoke: == auth-storm jwks proxy (200 clients)"
    if ! AUTH_STORM_N=200 STORM_MESSAGES=20 STORM_RATE=10 STORM_AFTER=1 \
        AUTH_STORM_OUT="$work/auth-storm" bash loadtest/auth-storm.sh jwks proxy; then
        failed+=("auth-storm")
    fi
elif [[ -n ${CI:-} ]]; then
    echo "smoke: CI has a Redis at 127.0.0.1:6379, and it does not answer" >&2
    failed+=("auth-storm")
else
    echo "smoke: SKIPPED auth-storm: no Redis answers at 127.0.0.1:6379"
fi

elapsed=$(( $(date +%s) - started ))
echo
if (( ${#failed[@]} > 0 )); then
    echo "smoke: FAILED (${failed[*]}) after ${elapsed}s" >&2
    exit 1
fi
echo "smoke: ok after ${elapsed}s"
