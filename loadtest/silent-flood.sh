#!/usr/bin/env bash
# Memory under a push flood to clients that never read.
#
# Starts a release pushgate on 127.0.0.1:<free port> (idle timeout 40 s),
# holds N WebSocket clients that never read or answer pings (the `evict`
# scenario), pushes PUSHES broadcasts of SIZE bytes to all of them, and
# prints the gateway's RSS: at start, with the clients held, after the
# flood, and after every client was evicted (4001). Counts are checked by
# the load client; the RSS figures are what this measures.
#
# Usage: loadtest/silent-flood.sh   (N=10000 PUSHES=300 SIZE=1024 by default)
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-10000}
PUSHES=${PUSHES:-300}
SIZE=${SIZE:-1024}

cargo build --release -p pushgate -p loadtest >/dev/null
release="${CARGO_TARGET_DIR:-target}/release"
# shellcheck source=loadtest/gateway-config.sh
source loadtest/gateway-config.sh
work=$(mktemp -d)
cp "$release/pushgate" "$work/pushgate"
write_config "$work/gateway.toml" "$work/pushgate"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
PUSHGATE_SERVER_LISTEN=127.0.0.1:$port PUSHGATE_SESSION_IDLE_TIMEOUT_SECS=40 \
  PUSHGATE_SESSION_PING_INTERVAL_SECS=20 PUSHGATE_LOG=warn \
  "$work/pushgate" --config "$work/gateway.toml" >"$work/gateway.log" 2>&1 &
pid=$!
trap 'kill -TERM $pid 2>/dev/null || true' EXIT
sleep 1
rss() { awk '/VmRSS/ {print $2}' "/proc/$pid/status"; }
echo "gateway RSS at start: $(rss) KiB"
"$release/loadtest" evict -n "$N" --idle-timeout-secs 40 --margin-secs 20 --check \
  --ws-url "ws://127.0.0.1:$port/ws?uid={user}" >"$work/evict.md" 2>&1 &
client=$!
sleep 12
echo "gateway RSS holding $N silent clients: $(rss) KiB"
data=$(python3 -c "print('x' * $SIZE)")
accepted=0
for _ in $(seq 1 "$PUSHES"); do
  code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/push" \
    -H "Authorization: Bearer $LOADTEST_API_KEY" -H 'Content-Type: application/json' \
    -d "{\"to\":\"*\",\"data\":\"$data\"}")
  [[ $code == 202 ]] && accepted=$((accepted + 1))
done
echo "pushes accepted: $accepted of $PUSHES ($SIZE bytes each, to every client)"
echo "gateway RSS after the flood: $(rss) KiB"
wait "$client"
echo "gateway RSS after every client was evicted: $(rss) KiB"
grep -E "closes with code 4001|still open|before their deadline" "$work/evict.md"
