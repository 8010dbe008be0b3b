#!/usr/bin/env bash
# Where a broadcast's first recipient's time goes, stage by stage, on the
# kernel's clock: a system-wide `perf record` of the system calls a push
# and its first delivery make, over one `loadtest fanout` or `sse-fanout`
# run against a private pushgate or Nchan (broadcast-only), analysed by
# first-recipient-stages.py. Per push: the pusher's write, the server's
# wake-up and read of the push, its first send of the frame, the
# recipient's wake-up and read. "From the server's read" is what the
# issue-18 target counts ("within 0.3 ms of the publish being
# accepted"): the read comes before the push is parsed and accepted, so
# the figure is an upper bound of that; `loadtest`'s own first-recipient
# figure counts from the pusher's write.
#
# Usage: loadtest/first-recipient-trace.sh PEER SCENARIO [OUT]
#   PEER: pushgate | nchan-broadcast;  SCENARIO: fanout | sse-fanout
#   OUT: a directory for the stage table (default: a new one under /tmp);
#   perf's raw data is deleted, its text too unless KEEP_EVENTS=1.
#   N=10000 connections, M=20 broadcasts at R=2 a second.
# Needs root (or perf_event_paranoid -1) and perf (Debian: linux-perf).
# Builds into $CARGO_TARGET_DIR (default target/). Nothing else should
# run meanwhile: the trace is of the whole machine.
set -euo pipefail
cd "$(dirname "$0")/.."
peer=${1:?usage: first-recipient-trace.sh pushgate|nchan-broadcast fanout|sse-fanout [OUT]}
scenario=${2:?usage: first-recipient-trace.sh pushgate|nchan-broadcast fanout|sse-fanout [OUT]}
out=${3:-$(mktemp -d "/tmp/first-recipient-$peer-$scenario.XXXXXX")}
N=${N:-10000}
M=${M:-20}
R=${R:-2}
case $scenario in fanout) url_flag=--ws-url ;; sse-fanout) url_flag=--sse-url ;; *)
    echo "first-recipient-trace: unknown scenario $scenario" >&2; exit 1 ;;
esac
command -v perf >/dev/null || { echo "first-recipient-trace: perf is missing (apt-get install linux-perf)" >&2; exit 1; }
mkdir -p "$out"
target=${CARGO_TARGET_DIR:-target}
cargo build -q --release --bin pushgate
cargo build -q --release -p loadtest

case $peer in
    pushgate)
        started=$(LOADTEST_PUSHGATE_BIN="$target/release/pushgate" loadtest/peers/pushgate/start.sh)
        stop() { loadtest/peers/pushgate/stop.sh "$prefix" --remove >/dev/null 2>&1 || true; }
        ;;
    nchan-broadcast)
        loadtest/peers/nchan/setup.sh >/dev/null
        started=$(loadtest/peers/nchan/start.sh)
        stop() { loadtest/peers/nchan/stop.sh "$prefix" --remove >/dev/null 2>&1 || true; }
        ;;
    *) echo "first-recipient-trace: unknown peer $peer" >&2; exit 1 ;;
esac
prefix=$(awk '$1 == "prefix" {print $2}' <<<"$started")
port=$(awk '$1 == "port" {print $2}' <<<"$started")
pid=$(awk '$1 == "pid" {print $2}' <<<"$started")
api_key=$(awk '$1 == "api_key" {print $2}' <<<"$started")
trap stop EXIT
# The server's processes: pushgate's one, or nginx's master and workers.
server_pids=$(echo "$pid" $(pgrep -P "$pid" || true) | tr ' ' ',')

base=127.0.0.1:$port
if [[ $peer == pushgate ]]; then
    targets=("$url_flag" "ws://$base/ws?uid={user}" --push-url "http://$base/push"
        --metrics-url "http://$base/metrics" --api-key "$api_key")
    [[ $scenario == sse-fanout ]] && targets[1]="http://$base/sse?uid={user}"
else
    targets=("$url_flag" "ws://$base/sub/broadcast?uid={user}" --push-url "http://$base/pub"
        --push-body '{data}' --metrics-url "http://$base/status" --ready-metric subscribers: --api-key '')
    [[ $scenario == sse-fanout ]] && targets[1]="http://$base/sub/broadcast?uid={user}"
fi
cmd=("$target/release/loadtest" "$scenario" -n "$N" -m "$M" -r "$R" "${targets[@]}" --pid "$pid")

# The whole run is traced (the connections' opening too); the stages
# script picks out the pushes. Only what it reads is recorded: wake-ups
# and reads that returned something, and sends (`sendto`, `writev`; not
# `write`, which perf's own writes of its data would flood).
perf record -q -a -k mono -m 16M \
    -e syscalls:sys_exit_epoll_wait --filter 'ret > 0' \
    -e syscalls:sys_exit_epoll_pwait --filter 'ret > 0' \
    -e syscalls:sys_exit_recvfrom --filter 'ret > 0' \
    -e syscalls:sys_enter_sendto \
    -e syscalls:sys_enter_writev \
    -o "$out/perf.data" -- "${cmd[@]}" >"$out/loadtest.md" 2>"$out/loadtest.err" &
traced=$!
# The load client (perf's child) and its worker processes, which hold
# the connections.
client=
for _ in $(seq 1 100); do
    client=$(pgrep -P "$traced" -f "release/loadtest" || true)
    [[ -n $client ]] && break
    sleep 0.1
done
[[ -n $client ]] || { echo "first-recipient-trace: the load client did not start" >&2; exit 1; }
# The workers, gathered while the client runs (it may start them one by one).
recipients=$out/recipients
: >"$recipients"
while kill -0 "$client" 2>/dev/null; do
    pgrep -P "$client" >>"$recipients" || true
    sleep 0.5
done
wait "$traced" || echo "first-recipient-trace: the load client failed (see $out/loadtest.err)" >&2
perf script -i "$out/perf.data" -F comm,pid,tid,time,event,trace --ns >"$out/events.txt" 2>/dev/null
rm -f "$out/perf.data"
{
    echo "peer: $peer, scenario: $scenario, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "pushgate commit: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src || echo ' (with uncommitted changes in src/)')"
    echo "command: ${cmd[*]}" | sed "s#$target/release/#target/release/#"
    python3 loadtest/first-recipient-stages.py "$out/events.txt" --server "$server_pids" --pusher "$client" --recipients "$(sort -u "$recipients" | paste -sd,)"
    grep -i "first recipient" "$out/loadtest.md" | head -3 | sed 's/^/loadtest: /'
} | tee "$out/stages.txt"
# Some 60 MB a run: kept only when asked (KEEP_EVENTS=1).
[[ ${KEEP_EVENTS:-0} == 1 ]] || rm -f "$out/events.txt"
rm -f "$recipients"
echo "first-recipient-trace: results in $out"
