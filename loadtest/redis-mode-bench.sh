#!/usr/bin/env bash
# Like for like: the same commands against a plain Redis and a
# cluster-enabled one (`--cluster-enabled yes`, one master holding every
# slot), each with one replica, from redis-benchmark. Per case, the CPU
# the master and its replica spent (/proc/<pid>/stat) per call, and the
# master's reads and writes per call (INFO stats, after CONFIG RESETSTAT).
# The Redis processes are private (free loopback ports, a temporary
# directory) and stopped by pid at the end.
#
# Usage: loadtest/redis-mode-bench.sh [N] [CLIENTS ...]   (default 30000 calls, clients 1 4)
# Output: a Markdown table on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."

n=${1:-30000}
shift || true
clients=("$@")
(( ${#clients[@]} > 0 )) || clients=(1 4)

free_port() {
    python3 tests/cluster/free-port.py
}

tmp=$(mktemp -d /tmp/pushgate-redis-mode.XXXXXX)
pids=()
cleanup() {
    local pid
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do
        for _ in $(seq 1 50); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
    done
    rm -rf "$tmp"
}
trap cleanup EXIT

# start PORT EXTRA_ARGS...: a redis-server on PORT, its pid in pids.
start() {
    local port=$1
    shift
    mkdir -p "$tmp/$port"
    redis-server --port "$port" --bind 127.0.0.1 --dir "$tmp/$port" --appendonly no --save '' \
        --daemonize yes --pidfile "$tmp/$port/redis.pid" --logfile "$tmp/$port/redis.log" "$@" >/dev/null
    for _ in $(seq 1 100); do
        redis-cli -p "$port" ping >/dev/null 2>&1 && break
        sleep 0.1
    done
    pids+=("$(cat "$tmp/$port/redis.pid")")
}

plain=$(free_port)
start "$plain"
plain_replica=$(free_port)
start "$plain_replica" --replicaof 127.0.0.1 "$plain"
cluster=$(free_port)
start "$cluster" --cluster-enabled yes --cluster-config-file "$tmp/$cluster/nodes.conf"
cluster_replica=$(free_port)
start "$cluster_replica" --cluster-enabled yes --cluster-config-file "$tmp/$cluster_replica/nodes.conf"
redis-cli -p "$cluster" cluster addslotsrange 0 16383 >/dev/null
redis-cli -p "$cluster_replica" cluster meet 127.0.0.1 "$cluster" >/dev/null
for _ in $(seq 1 100); do
    redis-cli -p "$cluster_replica" cluster nodes | grep -q "127.0.0.1:$cluster.*master" && break
    sleep 0.1
done
redis-cli -p "$cluster_replica" cluster replicate "$(redis-cli -p "$cluster" cluster myid)" >/dev/null
for port in "$plain_replica" "$cluster_replica"; do
    for _ in $(seq 1 200); do
        redis-cli -p "$port" info replication | grep -q 'master_link_status:up' && break
        sleep 0.1
    done
done
for _ in $(seq 1 100); do
    redis-cli -p "$cluster" cluster info | grep -q 'cluster_state:ok' && break
    sleep 0.1
done

cluster_sha=$(redis-cli -p "$plain" script load "$(cat src/bus/cluster/publish.lua)")
redis-cli -p "$cluster" script load "$(cat src/bus/cluster/publish.lua)" >/dev/null
redis_sha=$(redis-cli -p "$plain" script load "$(cat src/bus/redis/publish.lua)")
redis-cli -p "$cluster" script load "$(cat src/bus/redis/publish.lua)" >/dev/null

clk_tck=$(getconf CLK_TCK)
cpu_ms() {
    local stat
    stat=$(cat "/proc/$1/stat")
    stat=${stat##*) }
    awk -v t="$clk_tck" '{print int(($12 + $13) * 1000 / t)}' <<<"$stat"
}
pid_of() { redis-cli -p "$1" info server | tr -d '\r' | awk -F: '/^process_id:/ {print $2}'; }
stat_of() { redis-cli -p "$1" info stats | tr -d '\r' | awk -F: -v k="$2" '$1 == k {print $2}'; }

# A push to one of 3,000 users as the gateways send it (history size 100,
# ttl 300 s), every key under one hash tag; redis-benchmark puts a number
# below 3,000 in place of __rand_int__.
tag='{pg:s0}'
cluster_push=(evalsha "$cluster_sha" 7 "$tag:seq" "$tag:epoch" "$tag:aged" "$tag:times" "$tag:writer"
    "$tag:id" "$tag:h:u:__rand_int__" 0123456789abcdef 100 300000 1
    'head-' 0 1 1 '-tail' 1 "$tag:b:u:__rand_int__" u__rand_int__)
# The same, four pushes in one script: what the group commit sends when
# four pushes queued for the shard while its previous script ran.
cluster_push4=(evalsha "$cluster_sha" 13 "$tag:seq" "$tag:epoch" "$tag:aged" "$tag:times" "$tag:writer")
push_args=()
for _ in 1 2 3 4; do
    cluster_push4+=("$tag:id" "$tag:h:u:__rand_int__")
    push_args+=('head-' 0 1 1 '-tail' 1 "$tag:b:u:__rand_int__" u__rand_int__)
done
cluster_push4+=(0123456789abcdef 100 300000 4 "${push_args[@]}")
redis_push=(evalsha "$redis_sha" 6 "$tag:seq" "$tag:epoch" "$tag:aged" "$tag:times" "$tag:id"
    "$tag:h:u:__rand_int__" 0123456789abcdef 'head-' '-tail' u__rand_int__ 100 300000 0
    "$tag:bus" 6 0)

echo "| case | mode | clients | calls | master CPU µs per call | replica CPU µs per call | master reads / writes per call | usec per call (commandstats) |"
echo "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"
# bench NAME CLIENTS COMMAND...: on both modes, the plain one first.
bench() {
    local name=$1 c=$2 mode port replica m0 r0 m1 r1 reads writes usec
    shift 2
    for mode in plain cluster; do
        if [[ $mode == plain ]]; then port=$plain replica=$plain_replica; else port=$cluster replica=$cluster_replica; fi
        redis-cli -p "$port" config resetstat >/dev/null
        m0=$(cpu_ms "$(pid_of "$port")")
        r0=$(cpu_ms "$(pid_of "$replica")")
        redis-benchmark -p "$port" -n "$n" -c "$c" -r 3000 -q "$@" >/dev/null
        m1=$(cpu_ms "$(pid_of "$port")")
        r1=$(cpu_ms "$(pid_of "$replica")")
        reads=$(stat_of "$port" total_reads_processed)
        writes=$(stat_of "$port" total_writes_processed)
        usec=$(redis-cli -p "$port" info commandstats | tr -d '\r' |
            awk -F'[:,=]' -v c="cmdstat_$(tr '[:upper:]' '[:lower:]' <<<"$1")" '$1 == c {print $7}')
        awk -v name="$name" -v mode="$mode" -v c="$c" -v n="$n" -v m=$(( m1 - m0 )) -v r=$(( r1 - r0 )) \
            -v reads="$reads" -v writes="$writes" -v usec="$usec" \
            'BEGIN {printf "| %s | %s | %d | %d | %.1f | %.1f | %.2f / %.2f | %s |\n", name, mode, c, n,
                m * 1000 / n, r * 1000 / n, reads / n, writes / n, usec}'
    done
}

for c in "${clients[@]}"; do
    bench "INCR (one key)" "$c" incr "$tag:counter"
    bench "SPUBLISH, no subscriber" "$c" spublish "$tag:b:u:__rand_int__" hello
    bench "cluster bus's publish.lua (SPUBLISH)" "$c" "${cluster_push[@]}"
    bench "cluster bus's publish.lua, 4 pushes per call" "$c" "${cluster_push4[@]}"
    bench "one Redis's publish.lua (PUBLISH)" "$c" "${redis_push[@]}"
done
