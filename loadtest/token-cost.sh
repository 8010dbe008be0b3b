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
# Needs node (>= 18) to mint the tokens and the RSA key (no openssl loop,
# no extra crate). Results in loadtest/results/token-cost-<UTC time>/.
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
# config's secret, RS256 with a fresh 2048-bit key whose public half the
# gateway is given.
node - "$tmp" "$N" <<'EOF'
const crypto = require('node:crypto');
const fs = require('node:fs');
const [dir, n] = [process.argv[2], Number(process.argv[3])];
const secret = 'loadtest-secret-not-for-production';
const { privateKey, publicKey } = crypto.generateKeyPairSync('rsa', { modulusLength: 2048 });
fs.writeFileSync(`${dir}/rsa.public.pem`, publicKey.export({ type: 'spki', format: 'pem' }));
const b64 = (v) => Buffer.from(typeof v === 'string' ? v : JSON.stringify(v)).toString('base64url');
const exp = Math.floor(Date.now() / 1000) + 3600;
const lines = { hs256: [], rs256: [] };
for (let i = 0; i < n; i++) {
  const claims = b64({ sub: `u${i}`, exp });
  const hs = `${b64({ alg: 'HS256', typ: 'JWT' })}.${claims}`;
  lines.hs256.push(`u${i} ${hs}.${crypto.createHmac('sha256', secret).update(hs).digest('base64url')}`);
  const rs = `${b64({ alg: 'RS256', typ: 'JWT' })}.${claims}`;
  lines.rs256.push(`u${i} ${rs}.${crypto.sign('sha256', Buffer.from(rs), privateKey).toString('base64url')}`);
}
for (const kind of ['hs256', 'rs256']) fs.writeFileSync(`${dir}/${kind}.tokens`, lines[kind].join('\n') + '\n');
EOF

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
    start_gateway "rs256-$r" "PUSHGATE_AUTH_PUBLIC_KEYS=$tmp/rsa.public.pem"
    run rs256 "$r"
done
echo "token-cost: results in $out"
