#!/usr/bin/env bash
# pushgate against Nchan, the comparisons that matter, each scenario run
# ROUNDS times per gateway in turn (pushgate, nchan, pushgate, nchan, …),
# every run against a fresh server. Results (small files only: JSON and
# Markdown per run, each server log's tail, the comparison tables and bar
# charts, the exact commands) in loadtest/results/compare-<UTC time>/.
#
# Usage: loadtest/compare.sh [COMPARISON ...]   (default: idle-10k idle-19k fanout-10k poll-fanout-10k)
#   idle-10k         10,000 idle WebSockets: server memory and CPU per connection
#   idle-19k         the same at 19,000 (the client's per-process file limit)
#   fanout-10k       20 broadcasts at 2/s to 10,000 WebSockets: time to last
#                    recipient, server CPU per delivery
#   poll-fanout-10k  one broadcast to 10,000 parked long-polls
#   sse-fanout-10k   as fanout-10k over server-sent events
#   idle-10k-bcast, fanout-10k-bcast, poll-fanout-10k-bcast, sse-fanout-10k-bcast
#                    as above against Nchan's cheapest set-up: every
#                    client on the "broadcast" channel alone (the others
#                    give each Nchan client its user's channel too, as a
#                    pushgate connection has)
#   ROUNDS=3 (rounds per comparison); N=10000 (connections of the 10k ones).
#
# Builds into $CARGO_TARGET_DIR (default target/).
# Needs nginx and the Nchan module (loadtest/peers/nchan/setup.sh installs
# them from Debian). Both gateways listen on 127.0.0.1 only.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-3}
N=${N:-10000}
comparisons=("$@")
(( ${#comparisons[@]} > 0 )) || comparisons=(idle-10k idle-19k fanout-10k poll-fanout-10k)

loadtest/peers/nchan/setup.sh >/dev/null
cargo build --release --bin pushgate
cargo build --release -p loadtest

# Private copies: others may rebuild target/release meanwhile.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
target=${CARGO_TARGET_DIR:-target}
cp "$target/release/pushgate" "$tmp/pushgate"
cp "$target/release/loadtest" "$tmp/loadtest"
export LOADTEST_PUSHGATE_BIN="$tmp/pushgate"

out="loadtest/results/compare-$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$out"
{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "pushgate commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD -- src 2>/dev/null || echo ' (with uncommitted changes in src/)')"
    echo "nginx: $(nginx -v 2>&1 | sed 's/^nginx version: //'), nchan: $(dpkg-query -W -f='${Version}' libnginx-mod-nchan 2>/dev/null || echo unknown)"
    echo "machine: $(uname -sr), $(nproc) cores, $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo), shared with other jobs"
    echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "rounds: $ROUNDS"
} >"$out/about.txt"

status=0
jsons=()
for name in "${comparisons[@]}"; do
    peers=pushgate,nchan
    if [[ $name == *-bcast ]]; then
        peers=pushgate,nchan-broadcast
    fi
    case "${name%-bcast}" in
        idle-10k) args=(idle -- -n "$N" --hold-secs 30 --release-secs 3) ;;
        idle-19k) args=(idle -- -n 19000 --hold-secs 30 --release-secs 3) ;;
        fanout-10k) args=(fanout -- -n "$N" -m 20 -r 2) ;;
        poll-fanout-10k) args=(poll-fanout -- -n "$N" -m 1 --connect-rate 5000) ;;
        sse-fanout-10k) args=(sse-fanout -- -n "$N" -m 20 -r 2) ;;
        *)
            echo "compare: unknown comparison $name" >&2
            exit 1
            ;;
    esac
    # The scenario goes before the compare options, its own after `--`.
    scenario=${args[0]}
    cmd=("$tmp/loadtest" compare "$scenario" --rounds "$ROUNDS" --peers "$peers" --label "$name" --out "$out" "${args[@]:1}")
    echo "compare: ${cmd[*]}" | sed "s#$tmp/loadtest#target/release/loadtest#" | tee -a "$out/about.txt"
    "${cmd[@]}" || status=1
    [[ -f $out/compare-$name.json ]] && jsons+=("$out/compare-$name.json")
    echo "load average after $name: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/about.txt"
done

sed -i "s#$tmp/loadtest#target/release/loadtest#; s#$tmp/pushgate#target/release/pushgate#" "$out/commands.txt" 2>/dev/null || true
if (( ${#jsons[@]} > 0 )); then
    "$tmp/loadtest" compare-summary "${jsons[@]}" --markdown "$out/summary.md" --svg "$out/summary.svg" >/dev/null
fi
echo "compare: results in $out (summary.md, summary.svg)"
exit "$status"
