#!/usr/bin/env bash
# user/system CPU per WebSocket opened, pushgate and broadcast-only Nchan, alternating.
# Usage: split.sh ROUNDS   (from /work/main; LT = loadtest binary)
set -euo pipefail
cd /work/main
export LOADTEST_API_KEY="loadtest-api-key-not-for-production"
LT=${LT:-/work/ci-target/release/loadtest}
ticks() { # utime stime (clock ticks) summed over pid and its children
    local total_u=0 total_s=0 p
    for p in $1 $(pgrep -P "$1" || true); do
        read -r u s < <(awk '{print $14, $15}' /proc/$p/stat)
        total_u=$((total_u + u)); total_s=$((total_s + s))
    done
    echo "$total_u $total_s"
}
for round in $(seq 1 "${1:-3}"); do
  for peer in pushgate nchan; do
    prefix=/tmp/split-$peer-$round; rm -rf $prefix
    if [[ $peer == pushgate ]]; then
        out=$(LOADTEST_PUSHGATE_BIN=/tmp/pg-head loadtest/peers/pushgate/start.sh $prefix)
        port=$(awk '/^port/ {print $2}' <<<"$out"); pid=$(awk '/^pid/ {print $2}' <<<"$out")
        url="ws://127.0.0.1:$port/ws?uid={user}"; extra=(--metrics-url "http://127.0.0.1:$port/metrics")
    else
        out=$(loadtest/peers/nchan/start.sh $prefix)
        port=$(awk '/^port/ {print $2}' <<<"$out"); pid=$(awk '/^pid/ {print $2}' <<<"$out")
        url="ws://127.0.0.1:$port/sub/broadcast?uid={user}"; extra=(--metrics-url "http://127.0.0.1:$port/status" --ready-metric "subscribers:")
    fi
    sleep 1
    before=$(ticks $pid)
    "$LT" idle -n 10000 --hold-secs 8 --release-secs 2 --ws-url "$url" "${extra[@]}" --pid $pid > $prefix.report 2>&1 &
    lt=$!
    sleep 6
    after=$(ticks $pid)
    wait $lt || true
    opened=$(grep -E "connections opened" $prefix.report | head -1)
    read -r bu bs <<<"$before"; read -r au as <<<"$after"
    echo "$peer round $round: per open user $((au-bu)) us, system $((as-bs)) us (10 ms ticks over 10,000 opens) | $opened | $(grep 'CPU per connection opened' $prefix.report)"
    if [[ $peer == pushgate ]]; then loadtest/peers/pushgate/stop.sh $prefix >/dev/null 2>&1 || true; else loadtest/peers/nchan/stop.sh $prefix >/dev/null 2>&1 || true; fi
    sleep 2
  done
done
