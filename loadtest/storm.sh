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

# shellcheck source=loadtest/gateway-config.sh
source loadtest/gateway-config.sh

runs=("$@")
(( ${#runs[@]} > 0 )) || runs=(drain kill)
say() { echo "storm: $*" >&2; }
(( STORM_N <= STORM_MAX_CONNECTIONS )) || { say "STORM_N over $STORM_MAX_CONNECTIONS"; exit 1; }
[[ $(redis-cli -h "$REDIS_HOST" -p "$REDIS_PORT" ping 2>/dev/null) == PONG ]] || { say "no Redis at $REDIS_HOST:$REDIS_PORT"; exit 1; }
ulimit -n "$(ulimit -Hn)"

tmp=$(mktemp -d /tmp/pushgate-storm.XXXXXX)
copy_release "$tmp"
stamp=$(date -u +%Y%m%dT%H%M%SZ)
out=${STORM_OUT:-loadtest/results/storm-$stamp}
mkdir -p "$out"
key_root="loadtest-storm-$stamp"
write_storm_config "$tmp/base.toml" "$tmp/pushgate"

{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "built from: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD -- src loadtest/src 2>/dev/null || echo ' with uncommitted changes')"
    echo "machine: $(uname -sr), $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), open files per process $(ulimit -Hn)"
    echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "node config: $(storm_config_about)"
} >"$out/about.txt"

cleanup() {
    stop_storm_nodes
    delete_storm_keys "$key_root-"
    rm -rf "$tmp"
}
trap cleanup EXIT

failed=()
for run in "${runs[@]}"; do
    write_storm_run_config "$tmp/base.toml" "$tmp/$run.toml" "$key_root-$run"
    start_storm_node "$run.node-a" "$tmp/$run.toml"
    start_storm_node "$run.node-b" "$tmp/$run.toml"
    sleep 1
    storm_command "$run" "$STORM_N" "$run" \
        "ws://${storm_addrs[0]}/ws?uid={user}" "ws://${storm_addrs[1]}/ws?uid={user}"
    say "$run: ${storm_cmd[*]}"
    "${storm_cmd[@]}" || failed+=("$run")
    stop_storm_nodes
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/about.txt"
say "results in $out"
if (( ${#failed[@]} > 0 )); then
    say "FAILED: ${failed[*]}"
    exit 1
fi
