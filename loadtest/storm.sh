#!/usr/bin/env bash
# A reconnect storm (issue 16): two release pushgate nodes on one Redis,
# STORM_N WebSocket clients on node A, broadcasts through node B; node A
# is drained (SIGTERM) and then, with fresh nodes, killed (SIGKILL); every
# client comes back to node B with its cursor. Per run the load client's
# JSON, Markdown and chart of reconnects per second at B. Results in
# loadtest/results/storm-<UTC time>/ (node logs are *.log, not committed).
#
# Usage: loadtest/storm.sh [drain] [kill]   (default: both)
#
# Environment (no name starts with PUSHGATE_):
#   REDIS_HOST, REDIS_PORT   the Redis (default 127.0.0.1:6379)
#   STORM_N=19000            clients (a node holds at most 19,850 here)
#   STORM_SPREAD=5           node A's [server] drain_spread_secs
#   STORM_RATE=5             broadcasts per second, STORM_MESSAGES=200 of them
#   STORM_AFTER=5            seconds after the first broadcast when A is signalled
#   STORM_CONCURRENCY=100    handshakes in flight over all clients (reconnects too)
#   STORM_OUT                results directory
set -euo pipefail
cd "$(dirname "$0")/.."

REDIS_HOST=${REDIS_HOST:-127.0.0.1}
REDIS_PORT=${REDIS_PORT:-6379}
STORM_N=${STORM_N:-19000}
STORM_SPREAD=${STORM_SPREAD:-5}
STORM_RATE=${STORM_RATE:-5}
STORM_MESSAGES=${STORM_MESSAGES:-200}
STORM_AFTER=${STORM_AFTER:-5}
STORM_CONCURRENCY=${STORM_CONCURRENCY:-100}
# The process may open 20,000 files here; a node needs some for itself.
NODE_MAX_CONNECTIONS=19850

runs=("$@")
(( ${#runs[@]} > 0 )) || runs=(drain kill)
say() { echo "storm: $*" >&2; }
rcli() { redis-cli -h "$REDIS_HOST" -p "$REDIS_PORT" "$@"; }
(( STORM_N <= NODE_MAX_CONNECTIONS )) || { say "STORM_N over $NODE_MAX_CONNECTIONS"; exit 1; }
[[ $(rcli ping 2>/dev/null) == PONG ]] || { say "no Redis at $REDIS_HOST:$REDIS_PORT"; exit 1; }
ulimit -n "$(ulimit -Hn)"

cargo build --release --bin pushgate
cargo build --release -p loadtest
stamp=$(date -u +%Y%m%dT%H%M%SZ)
out=${STORM_OUT:-loadtest/results/storm-$stamp}
mkdir -p "$out"
tmp=$(mktemp -d /tmp/pushgate-storm.XXXXXX)
cp target/release/pushgate "$tmp/pushgate"
cp target/release/loadtest "$tmp/loadtest"
key_root="loadtest-storm-$stamp"

# shellcheck source=loadtest/gateway-config.sh
source loadtest/gateway-config.sh
write_config "$tmp/base.toml" "$tmp/pushgate"
# The drain spread needs a drain timeout past it; history covers a
# killed node's clients coming back over 30 s of broadcasts.
sed -i -e "s/^drain_timeout_secs = .*/drain_timeout_secs = $(( STORM_SPREAD + 15 ))/" \
    -e "s/^drain_spread_secs = .*/drain_spread_secs = $STORM_SPREAD/" \
    -e "s/^max_connections = .*/max_connections = $NODE_MAX_CONNECTIONS/" "$tmp/base.toml"
printf '\n[history]\nsize = 10000\n' >>"$tmp/base.toml"

{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "built from: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD -- src loadtest/src 2>/dev/null || echo ' with uncommitted changes')"
    echo "machine: $(uname -sr), $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), open files per process $(ulimit -Hn)"
    echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "node config: loadtest/gateway-config.sh with drain_timeout_secs = $(( STORM_SPREAD + 15 )), drain_spread_secs = $STORM_SPREAD, max_connections = $NODE_MAX_CONNECTIONS, [history] size = 10000, [broker] kind = \"redis\""
} >"$out/about.txt"

pids=()
addrs=()
stop_nodes() {
    local pid
    for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
    pids=()
    addrs=()
}
cleanup() {
    stop_nodes
    rcli --scan --pattern "$key_root-*" | xargs -r -n 500 redis-cli -h "$REDIS_HOST" -p "$REDIS_PORT" DEL >/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT

# start_nodes RUN: nodes A and B under key prefix <key_root>-RUN.
start_nodes() {
    local run=$1 i addr pid
    cp "$tmp/base.toml" "$tmp/$run.toml"
    printf '\n[broker]\nkind = "redis"\nurl = "redis://%s:%s"\nkey_prefix = "%s"\n' \
        "$REDIS_HOST" "$REDIS_PORT" "$key_root-$run" >>"$tmp/$run.toml"
    "$tmp/pushgate" check-config --config "$tmp/$run.toml" >/dev/null
    for i in a b; do
        PUSHGATE_LOG=info "$tmp/pushgate" --config "$tmp/$run.toml" >"$out/$run.node-$i.log" 2>&1 </dev/null &
        pid=$!
        pids+=("$pid")
        addr=""
        for _ in $(seq 1 100); do
            addr=$(grep -a "serving" "$out/$run.node-$i.log" 2>/dev/null | grep -ao '127\.0\.0\.1:[0-9]\+' | head -n1 || true)
            [[ -n $addr ]] && break
            sleep 0.1
        done
        [[ -n $addr ]] || { say "node $i did not start (see $out/$run.node-$i.log)"; exit 1; }
        addrs+=("$addr")
        say "$run: node $i pid $pid on $addr"
    done
    sleep 1
}

failed=()
for run in "${runs[@]}"; do
    start_nodes "$run"
    flag=()
    [[ $run == kill ]] && flag=(--kill)
    cmd=("$tmp/loadtest" storm -n "$STORM_N" -m "$STORM_MESSAGES" -r "$STORM_RATE"
        --ws-url "ws://${addrs[0]}/ws?uid={user},ws://${addrs[1]}/ws?uid={user}"
        --push-url "http://${addrs[1]}/push" --metrics-url "http://${addrs[1]}/metrics"
        --node-pid "${pids[0]}" "${flag[@]}" --storm-after-secs "$STORM_AFTER"
        --spread-secs "$STORM_SPREAD" --connect-rate 3000 --connect-concurrency "$STORM_CONCURRENCY"
        --per-worker 10000 --sources 2
        --timeout-secs 300 --check
        --json "$out/$run.json" --markdown "$out/$run.md" --chart "$out/$run.svg")
    echo "$run: ${cmd[*]}" | sed "s|$tmp/loadtest|target/release/loadtest|" >>"$out/commands.txt"
    say "$run: ${cmd[*]}"
    "${cmd[@]}" || failed+=("$run")
    stop_nodes
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/about.txt"
say "results in $out"
if (( ${#failed[@]} > 0 )); then
    say "FAILED: ${failed[*]}"
    exit 1
fi
