#!/usr/bin/env bash
# What a client token costs the gateway to check: server CPU per WebSocket
# opened with an HS256 token (shared secret) and with an RS256 token (a
# public key from [auth] public_keys), each against its own fresh release
# pushgate, the two alternating RUNS times.
#
# The figure is the load client's cpu_per_open_us (`loadtest idle`): the
# server's utime + stime from /proc/<pid>/stat just before the first
# connection and once all are open, divided by the connections opened. It
# holds the whole open (TCP accept, HTTP upgrade, token check, join), so
# the difference between the two is the signature check.
#
# Usage: loadtest/token-cost.sh   (N=5000 connections, RUNS=3 by default)
# Needs node (>= 18) to mint the tokens (loadtest/mint-tokens.js).
# Results in loadtest/results/token-cost-<UTC time>/.
set -euo pipefail
cd "$(dirname "$0")/.."

N=${N:-5000}
RUNS=${RUNS:-3}
target_dir=${CARGO_TARGET_DIR:-target}

cargo build --release -p pushgate
cargo build --release -p loadtest
out="loadtest/results/token-cost-$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$out"
{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "pushgate commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD -- src 2>/dev/null || echo ' (with uncommitted changes in src/)')"
    echo "machine: $(uname -sr), $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "connections per run: $N, runs per kind: $RUNS"
} >"$out/about.txt"

# shellcheck source=loadtest/gateway-config.sh
source loadtest/gateway-config.sh

tmp=$(mktemp -d)
cp "$target_dir/release/pushgate" "$tmp/pushgate"
write_config "$out/gateway.toml" "$tmp/pushgate"
trap 'stop_gateway; rm -rf "$tmp"' EXIT

# Users u0..u(N-1), tokens valid for an hour: HS256 with the load
# config's secret, RS256 with the 2048-bit test key rsa-a (its public
# half is given to the gateway).
rsa=tests/fixtures/auth/rsa-a
node loadtest/mint-tokens.js --alg hs256 --secret "$LOADTEST_SECRET" -n "$N" >"$tmp/hs256.tokens"
node loadtest/mint-tokens.js --alg rs256 --key "$rsa.private.test.pem" -n "$N" >"$tmp/rs256.tokens"

run() {
    local kind=$1 run=$2
    local name="$kind-$run"
    local cmd=(env "LOADTEST_TOKEN_FILE=$tmp/$kind.tokens" "$target_dir/release/loadtest" idle
        -n "$N" --hold-secs 2 --release-secs 1
        --ws-url "ws://$addr/ws?token={token}"
        --push-url "http://$addr/push"
        --metrics-url "http://$addr/metrics"
        --pid "$gw_pid"
        --json "$out/$name.json" --markdown "$out/$name.md")
    echo "token-cost: ${cmd[*]}" | tee -a "$out/commands.txt"
    "${cmd[@]}" >/dev/null
    stop_gateway
    jq -r --arg name "$name" \
        '[$name, .results.connections_opened, .results.connections_failed, .results.cpu_per_open_us] | @tsv' \
        "$out/$name.json" | tee -a "$out/summary.tsv"
}

echo -e "run\topened\tfailed\tcpu_per_open_us" | tee "$out/summary.tsv"
for r in $(seq 1 "$RUNS"); do
    start_gateway "hs256-$r"
    run hs256 "$r"
    start_gateway "rs256-$r" "PUSHGATE_AUTH_PUBLIC_KEYS=$rsa.public.pem"
    run rs256 "$r"
done
echo "token-cost: results in $out"
