#!/usr/bin/env bash
# run.sh NICE ROUND: one fanout run against a fresh gateway, lanes reniced to NICE (0 = as is)
set -euo pipefail
cd /work/main
export LOADTEST_API_KEY=loadtest-api-key-not-for-production
nice=$1 round=$2
prefix=/tmp/nice-exp/gw-$nice-$round
started=$(LOADTEST_PUSHGATE_BIN=/tmp/pg-d2 loadtest/peers/pushgate/start.sh "$prefix")
pid=$(awk '/^pid/ {print $2}' <<<"$started"); port=$(awk '/^port/ {print $2}' <<<"$started")
for task in /proc/$pid/task/*; do
  if grep -q pushgate-fanout "$task/comm"; then
    if [[ $nice != 0 ]]; then
      if [[ $nice == batch ]]; then chrt --batch -p 0 "${task##*/}"; else renice -n "$nice" -p "${task##*/}" >/dev/null; fi
    fi
  fi
done
sleep 1
load=$(cut -d' ' -f1 /proc/loadavg)
report=$(target/release/loadtest fanout -n 10000 -m 20 -r 2 --ws-url "ws://127.0.0.1:$port/ws?uid={user}" --push-url "http://127.0.0.1:$port/push" --metrics-url "http://127.0.0.1:$port/metrics" --pid "$pid" 2>&1) || true
loadtest/peers/pushgate/stop.sh "$prefix" >/dev/null 2>&1 || true
echo "$nice round $round (load $load): $(grep -E '^\| (lost|duplicated|time to last recipient|time to first recipient|delivery latency|server CPU per)' <<<"$report" | sed -E 's/^\| //; s/ \|$//; s/ \| / /g' | paste -sd ';' -)"
