#!/usr/bin/env bash
# The reference measurements: each scenario against its own fresh release
# pushgate (so memory baselines are clean), results in
# loadtest/results/<UTC time>/ as JSON, Markdown and SVG.
#
# Usage: loadtest/measure.sh [idle] [fanout] [poll-fanout] [evict]  (default: all)
#   N_IDLE, N_FANOUT, N_POLL, N_EVICT override the connection counts.
set -euo pipefail
cd "$(dirname "$0")/.."

N_IDLE=${N_IDLE:-19000}
N_FANOUT=${N_FANOUT:-19000}
N_POLL=${N_POLL:-10000}
N_EVICT=${N_EVICT:-10000}
scenarios=("$@")
(( ${#scenarios[@]} > 0 )) || scenarios=(idle fanout poll-fanout evict)

cargo build --release -p pushgate
cargo build --release -p loadtest
out="loadtest/results/$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$out"
{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "pushgate commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD -- src 2>/dev/null || echo ' (with uncommitted changes in src/)')"
    echo "machine: $(uname -sr), $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
} >"$out/about.txt"

# shellcheck source=loadtest/gateway-config.sh
source loadtest/gateway-config.sh

tmp=$(mktemp -d)
# Our own copy of the binary: others may rebuild target/release meanwhile.
cp target/release/pushgate "$tmp/pushgate"
write_config "$out/gateway.toml" "$tmp/pushgate"

trap 'stop_gateway; rm -rf "$tmp"' EXIT

run() {
    local name=$1
    shift
    local cmd=(target/release/loadtest "$@"
        --ws-url "ws://$addr/ws?uid={user}"
        --poll-url "http://$addr/poll?uid={user}"
        --push-url "http://$addr/push"
        --metrics-url "http://$addr/metrics"
        --pid "$gw_pid"
        --json "$out/$name.json" --markdown "$out/$name.md" --svg "$out/$name.svg")
    echo "measure: ${cmd[*]}" | tee -a "$out/commands.txt"
    "${cmd[@]}"
    stop_gateway
}

for scenario in "${scenarios[@]}"; do
    case "$scenario" in
        idle)
            start_gateway idle
            run idle idle -n "$N_IDLE" --hold-secs 30 --release-secs 3
            ;;
        fanout)
            start_gateway fanout
            run fanout fanout -n "$N_FANOUT" -m 20 -r 2
            ;;
        poll-fanout)
            start_gateway poll-fanout
            run poll-fanout poll-fanout -n "$N_POLL" -m 1 --connect-rate 5000
            ;;
        evict)
            start_gateway evict PUSHGATE_SESSION_IDLE_TIMEOUT_SECS=30 PUSHGATE_SESSION_PING_INTERVAL_SECS=10
            run evict evict -n "$N_EVICT" --idle-timeout-secs 30 --margin-secs 30
            ;;
        *)
            echo "measure: unknown scenario $scenario" >&2
            exit 1
            ;;
    esac
done
echo "measure: results in $out"
