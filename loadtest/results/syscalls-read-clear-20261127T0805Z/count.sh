#!/usr/bin/env bash
# count.sh BIN OUT SCENARIO ARGS...: strace -f -c on a fresh gateway through one loadtest run
set -euo pipefail
bin=$1 out=$2 scen=$3; shift 3
cd /work/main
prefix=$(mktemp -d /tmp/sc/gw.XXXX)
started=$(LOADTEST_PUSHGATE_BIN=$bin loadtest/peers/pushgate/start.sh "$prefix")
pid=$(awk '/^pid/ {print $2}' <<<"$started"); port=$(awk '/^port/ {print $2}' <<<"$started")
sleep 1
strace -f -c -p "$pid" -o "$out" & st=$!
sleep 1
export LOADTEST_API_KEY="loadtest-api-key-not-for-production"
target/release/loadtest "$scen" "$@" --ws-url "ws://127.0.0.1:$port/ws?uid={user}" --poll-url "http://127.0.0.1:$port/poll?uid={user}" --push-url "http://127.0.0.1:$port/push" --sse-url "http://127.0.0.1:$port/sse?uid={user}" --pid "$pid" > "$out.report" 2>&1 || true
sleep 1
kill -INT $st; wait $st || true
loadtest/peers/pushgate/stop.sh "$prefix" >/dev/null 2>&1 || true
rm -rf "$prefix"
