#!/usr/bin/env bash
# Counts, per thread, what every gateway node of a `loadtest/cluster.sh` run
# does in the kernel: `perf stat` (software events and system-call
# tracepoints, counting only: no sampling, so the run keeps its shape)
# attached to each node as it starts, until the node exits.
#
# Usage: loadtest/perf-stat-nodes.sh OUT_DIR &   then run cluster.sh; kill it after.
# Writes OUT_DIR/<pid>.txt (perf's per-thread table) and OUT_DIR/pids.txt.
# Needs perf (Debian's linux-perf) and kernel.perf_event_paranoid <= 0
# (sysctl -w kernel.perf_event_paranoid=-1).
set -euo pipefail
out=${1:?usage: loadtest/perf-stat-nodes.sh OUT_DIR}
mkdir -p "$out"
events=context-switches,cpu-migrations,page-faults,raw_syscalls:sys_enter
for call in epoll_wait epoll_ctl futex sched_yield read write writev sendto sendmsg recvfrom; do
    events+=",syscalls:sys_enter_$call"
done
declare -A seen
while true; do
    # cluster.sh starts its nodes as <tmp>/pushgate --config <tmp>/<step>.toml
    for pid in $(pgrep -f 'pushgate-cluster\..*/pushgate --config' || true); do
        [[ -n ${seen[$pid]:-} ]] && continue
        seen[$pid]=1
        perf stat --per-thread -e "$events" -p "$pid" -o "$out/$pid.txt" >/dev/null 2>&1 &
        echo "$(date -u +%T) $pid $(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null || true)" >>"$out/pids.txt"
    done
    sleep 0.1
done
