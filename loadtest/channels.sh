#!/usr/bin/env bash
# The channel measurements (README "Channels under load"): each step
# against its own fresh release pushgate (clean memory baseline), with
# every channel public to anonymous clients; results in
# loadtest/results/channels-<UTC time>/ as JSON, Markdown and SVG, with the
# exact commands (commands.txt) and the gateway logs.
#
# Usage: loadtest/channels.sh [STEP ...]   (default: all, in this order)
#   broadcast        fanout: N_MEMBERS WebSockets, M broadcasts at R/s (today's broadcast, alone)
#   channel-fanout   phase A: the same broadcasts to N_MEMBERS in channel c.hot;
#                    phase B: N_FANOUT connected, M pushes to c.hot at R/s
#   idle-plain       idle: N_IDLE WebSockets in no channel
#   idle-channels    idle: N_IDLE WebSockets, each in 10 of 1,000 channels
#   many-small       fanout: N_SMALL WebSockets, SMALL_CHANNELS channels of one
#                    subscriber each (stripe), SMALL_RATE pushes/s to one channel each
#                    for SMALL_SECS s
#   churn-channels   churn: N_CHURN clients in 5 of 100 channels each, reconnecting
#                    with their cursor; every 4th push a broadcast, the others to 2 channels
# Environment: N_FANOUT (19000), N_MEMBERS (10000), M (20), R (2), N_IDLE (19000),
#   N_SMALL (19000), SMALL_CHANNELS (100000), SMALL_RATE (10000), SMALL_SECS (30),
#   SMALL_PUSH_CONNS (16), N_CHURN (2000), CHURN_M (200), CHURN_R (20).
# Needs CARGO_TARGET_DIR's (or target/) release pushgate and loadtest; builds them.
set -euo pipefail
cd "$(dirname "$0")/.."

N_FANOUT=${N_FANOUT:-19000}
N_MEMBERS=${N_MEMBERS:-10000}
M=${M:-20}
R=${R:-2}
N_IDLE=${N_IDLE:-19000}
N_SMALL=${N_SMALL:-19000}
SMALL_CHANNELS=${SMALL_CHANNELS:-100000}
SMALL_RATE=${SMALL_RATE:-10000}
SMALL_SECS=${SMALL_SECS:-30}
SMALL_PUSH_CONNS=${SMALL_PUSH_CONNS:-16}
N_CHURN=${N_CHURN:-2000}
CHURN_M=${CHURN_M:-200}
CHURN_R=${CHURN_R:-20}
steps=("$@")
(( ${#steps[@]} > 0 )) || steps=(broadcast channel-fanout idle-plain idle-channels many-small churn-channels)

cargo build --release -p pushgate
cargo build --release -p loadtest
release="${CARGO_TARGET_DIR:-target}/release"
out="loadtest/results/channels-$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$out"
{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "pushgate commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD -- src 2>/dev/null || echo ' (with uncommitted changes in src/)')"
    echo "machine: $(uname -sr), $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg) (shared with other work)"
} >"$out/about.txt"

# shellcheck source=loadtest/gateway-config.sh
source loadtest/gateway-config.sh

tmp=$(mktemp -d)
# Our own copies: others may rebuild the release binaries meanwhile.
cp "$release/pushgate" "$tmp/pushgate"
cp "$release/loadtest" "$tmp/loadtest"
write_config "$out/gateway.toml" "$tmp/pushgate"

trap 'stop_gateway; rm -rf "$tmp"' EXIT

failed=()
run() {
    local name=$1
    shift
    local cmd=("$tmp/loadtest" "$@"
        --ws-url "ws://$addr/ws?uid={user}"
        --push-url "http://$addr/push"
        --metrics-url "http://$addr/metrics"
        --pid "$gw_pid" --check
        --json "$out/$name.json" --markdown "$out/$name.md" --svg "$out/$name.svg")
    echo "channels: ${cmd[*]}" | tee -a "$out/commands.txt"
    echo "  (load average before: $(cut -d' ' -f1-3 /proc/loadavg))" | tee -a "$out/commands.txt"
    "${cmd[@]}" || failed+=("$name")
    stop_gateway
    sleep 2
}

small_messages=$(( SMALL_RATE * SMALL_SECS ))
for step in "${steps[@]}"; do
    case "$step" in
        broadcast)
            start_gateway broadcast
            run broadcast fanout -n "$N_MEMBERS" -m "$M" -r "$R" --per-worker 19000
            ;;
        channel-fanout)
            start_gateway channel-fanout
            run channel-fanout channel-fanout -n "$N_FANOUT" --members "$N_MEMBERS" \
                -m "$M" -r "$R" --per-worker 19000
            ;;
        idle-plain)
            start_gateway idle-plain
            run idle-plain idle -n "$N_IDLE" --hold-secs 10 --per-worker 19000
            ;;
        idle-channels)
            start_gateway idle-channels
            run idle-channels idle -n "$N_IDLE" --hold-secs 10 --per-worker 19000 \
                --channels 1000 --channels-per-conn 10
            ;;
        many-small)
            start_gateway many-small
            run many-small fanout -n "$N_SMALL" --per-worker 19000 \
                --channels "$SMALL_CHANNELS" --channel-layout stripe \
                -m "$small_messages" -r "$SMALL_RATE" --push-conns "$SMALL_PUSH_CONNS"
            ;;
        churn-channels)
            start_gateway churn-channels
            run churn-channels churn -n "$N_CHURN" -m "$CHURN_M" -r "$CHURN_R" \
                --reconnect-min-ms 100 --reconnect-max-ms 800 \
                --channels 100 --channels-per-conn 5 --broadcast-every 4 --channels-per-push 2
            ;;
        *)
            echo "channels: unknown step $step" >&2
            exit 1
            ;;
    esac
done
echo "channels: results in $out"
if (( ${#failed[@]} > 0 )); then
    echo "channels: --check failed for: ${failed[*]}" >&2
    exit 1
fi
