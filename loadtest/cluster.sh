#!/usr/bin/env bash
# Several release pushgate nodes on one Redis or on a Redis Cluster
# (`[broker] kind = "redis"`, CLUSTER_BROKER), measured with the load
# client: broadcast to 1 node against 5 nodes, publishes per push, a node
# killed with SIGKILL under a stream of pushes, personal messages on 1
# node against 3, pushes to thousands of distinct streams. Each step
# starts its own fresh nodes under its own Redis key prefix, stops them by
# pid and deletes its keys. Per step it records the publishes Redis ran,
# the CPU each Redis process spent from the first push to the last
# delivery (the load client reads /proc/<pid>/stat of each, --broker-pid,
# at the moments it reads the nodes'; INFO cpu around the whole load
# client run, connects included, is kept beside it) and the
# messages each node took from the broker
# (pushgate_bus_messages_received_total). Results in
# loadtest/results/cluster-<UTC time>/: per step the load client's JSON
# and Markdown and the broker figures, plus summary.md, summary.json,
# commands.txt and about.txt (node and Redis logs are *.log, not
# committed).
#
# Usage: loadtest/cluster.sh [STEP ...]   (default: every step, in this order)
#   fanout-1        1 node:  CLUSTER_WS/5 WebSockets + CLUSTER_SSE/5 SSE + CLUSTER_POLL/5 long-polls
#   fanout-5        5 nodes: CLUSTER_WS + CLUSTER_SSE + CLUSTER_POLL, connection k on node k mod 5
#   fanout-5-small  5 nodes holding fanout-1's clients (the bus without the extra load)
#   failover        5 nodes, FAILOVER_WS/_SSE/_POLL clients, broadcasts at FAILOVER_RATE/s,
#                   node 5 killed with SIGKILL FAILOVER_KILL_AFTER s into the pushes
#   personal-1      1 node:  PERSONAL_N users, PERSONAL_ROUNDS personal pushes each, back to back
#   personal-3      3 nodes: the same users, connection k on node k mod 3
#   personal-1-paced, personal-3-paced   the same at PERSONAL_PACED_RATE pushes/s (latency
#                   below saturation)
#   streams-1       1 node: STREAMS_N users, STREAMS_ROUNDS pushes each, every push to one
#                   user (STREAMS_N distinct streams), back to back: the broker's CPU per push
#
# Environment (no name starts with PUSHGATE_: pushgate reads every
# PUSHGATE_* variable as configuration and refuses unknown ones):
#   CLUSTER_BROKER=redis         redis: the Redis at REDIS_HOST:REDIS_PORT;
#                                standalone: a fresh private redis-server on a free loopback
#                                port (no persistence) with one replica (--replicaof), as each
#                                cluster master has one, for a side-by-side with the cluster;
#                                cluster: a fresh Redis Cluster of 3 masters and 3 replicas on
#                                loopback (tests/cluster/redis-cluster.sh), [broker] cluster = true
#   CLUSTER_SHARDS=6             [broker] shards on a cluster
#   REDIS_HOST, REDIS_PORT       the Redis of CLUSTER_BROKER=redis (default 127.0.0.1:6379)
#   CLUSTER_WS=95000 CLUSTER_SSE=2000 CLUSTER_POLL=2000
#   CLUSTER_MESSAGES=8 CLUSTER_RATE=0.25   broadcasts in the fanout steps (one every 4 s: a
#                                          broadcast to 99,000 clients needs ~3 s of CPU here)
#   FAILOVER_WS=5000 FAILOVER_SSE=500 FAILOVER_POLL=500
#   FAILOVER_MESSAGES=100 FAILOVER_RATE=10 FAILOVER_KILL_AFTER=4
#   PERSONAL_N=15000 PERSONAL_ROUNDS=10 PERSONAL_BATCH=100 PERSONAL_PACED_RATE=100
#   PERSONAL_CONNECT_RATE=4000   connects per second per node in the personal and streams
#                                steps: under a node's own connection_rate (5000/s), which
#                                answers 503 past it (the load client does not retry a
#                                first connect)
#   STREAMS_N=3000 STREAMS_ROUNDS=10
#   STREAMS_PUSH_CONNS=4         pushes in flight at once in streams-1 (the load client's
#                                --push-conns)
#   CLUSTER_NODE_CORES=0         [server] cores of every node (0: one runtime worker and one
#                                fan-out thread per core of the machine); 1 sizes each of
#                                several nodes on this 2-core machine for its share
#   CLUSTER_IDLE_SECS=0          when over 0: after its nodes start and before any client
#                                connects, each step reads every node's CPU (/proc/<pid>/stat)
#                                over this many seconds: a node's fixed cost with no users
#   CLUSTER_OUT                  results directory (default loadtest/results/cluster-<UTC time>)
#   LOADTEST_PUSHGATE_BIN        a pushgate binary to run instead of building the working
#                                tree's (for example one built from a clean `git archive HEAD`)
#   LOADTEST_PUSHGATE_COMMIT     what that binary was built from, for about.txt
#
# Nothing on the machine is changed: if a kernel limit is too small for
# the run, the script says which sysctl to set and exits.
set -euo pipefail
cd "$(dirname "$0")/.."

REDIS_HOST=${REDIS_HOST:-127.0.0.1}
REDIS_PORT=${REDIS_PORT:-6379}
CLUSTER_WS=${CLUSTER_WS:-95000}
CLUSTER_SSE=${CLUSTER_SSE:-2000}
CLUSTER_POLL=${CLUSTER_POLL:-2000}
CLUSTER_MESSAGES=${CLUSTER_MESSAGES:-8}
CLUSTER_RATE=${CLUSTER_RATE:-0.25}
FAILOVER_WS=${FAILOVER_WS:-5000}
FAILOVER_SSE=${FAILOVER_SSE:-500}
FAILOVER_POLL=${FAILOVER_POLL:-500}
FAILOVER_MESSAGES=${FAILOVER_MESSAGES:-100}
FAILOVER_RATE=${FAILOVER_RATE:-10}
FAILOVER_KILL_AFTER=${FAILOVER_KILL_AFTER:-4}
PERSONAL_N=${PERSONAL_N:-15000}
PERSONAL_ROUNDS=${PERSONAL_ROUNDS:-10}
PERSONAL_BATCH=${PERSONAL_BATCH:-100}
PERSONAL_PACED_RATE=${PERSONAL_PACED_RATE:-100}
PERSONAL_CONNECT_RATE=${PERSONAL_CONNECT_RATE:-4000}
STREAMS_N=${STREAMS_N:-3000}
STREAMS_ROUNDS=${STREAMS_ROUNDS:-10}
STREAMS_PUSH_CONNS=${STREAMS_PUSH_CONNS:-4}
CLUSTER_BROKER=${CLUSTER_BROKER:-redis}
CLUSTER_SHARDS=${CLUSTER_SHARDS:-6}
CLUSTER_IDLE_SECS=${CLUSTER_IDLE_SECS:-0}
CLUSTER_NODE_CORES=${CLUSTER_NODE_CORES:-0}
case "$CLUSTER_BROKER" in
    redis | standalone | cluster) ;;
    *) echo "cluster: CLUSTER_BROKER is redis, standalone or cluster, not $CLUSTER_BROKER" >&2; exit 1 ;;
esac
# Connections per loopback source address: well under the ephemeral port
# range, so sockets left in TIME_WAIT by an earlier step do not run a
# source out of ports.
PER_SOURCE=12000
# Steps start once fewer sockets than this are in TIME_WAIT (at most 70 s
# later): each keeps its source port for 60 s, and a client that binds its
# source address (--sources) finds no free port while its address's range
# is full of them (an earlier step, a churn run, other jobs).
TIME_WAIT_MAX=5000
# A node's connection limit: the process may open 20,000 files, and needs
# some for itself (listener, Redis, epoll).
NODE_MAX_CONNECTIONS=19850

steps=("$@")
(( ${#steps[@]} > 0 )) || steps=(fanout-1 fanout-5 fanout-5-small failover
    personal-1 personal-3 personal-1-paced personal-3-paced)

say() { echo "cluster: $*" >&2; }
rcli() { redis-cli -h "$REDIS_HOST" -p "$REDIS_PORT" "$@"; }
# redis_ports: every Redis process of the run (a cluster's masters first);
# redis_pids: their process ids where they run here (standalone, cluster).
redis_ports=()
redis_pids=()
replica_port=""

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# --- preflight: tools, Redis, kernel limits --------------------------------

# n: the step's connections; per_node: the most one node must hold (for
# failover, after the kill: four nodes hold them all).
largest=0
for step in "${steps[@]}"; do
    case "$step" in
        fanout-5) n=$(( CLUSTER_WS + CLUSTER_SSE + CLUSTER_POLL )); per_node=$(( (n + 4) / 5 )) ;;
        fanout-1) n=$(( (CLUSTER_WS + CLUSTER_SSE + CLUSTER_POLL) / 5 )); per_node=$n ;;
        fanout-5-small) n=$(( (CLUSTER_WS + CLUSTER_SSE + CLUSTER_POLL) / 5 )); per_node=$(( (n + 4) / 5 )) ;;
        failover) n=$(( FAILOVER_WS + FAILOVER_SSE + FAILOVER_POLL )); per_node=$(( (n + 3) / 4 )) ;;
        personal-1 | personal-1-paced) n=$PERSONAL_N; per_node=$n ;;
        personal-3 | personal-3-paced) n=$PERSONAL_N; per_node=$(( (n + 2) / 3 )) ;;
        streams-1) n=$STREAMS_N; per_node=$n ;;
        *) say "unknown step $step"; exit 1 ;;
    esac
    if (( per_node > NODE_MAX_CONNECTIONS )); then
        say "$step: a node would hold $per_node connections, over its max_connections of $NODE_MAX_CONNECTIONS (20,000 open files per process here); lower the counts"
        exit 1
    fi
    if (( n > largest )); then largest=$n; fi
done

for tool in redis-cli jq ss curl; do
    command -v "$tool" >/dev/null || { say "needs $tool"; exit 1; }
done
if [[ $CLUSTER_BROKER == redis ]]; then
    [[ $(rcli ping 2>/dev/null) == PONG ]] || { say "no Redis answers at $REDIS_HOST:$REDIS_PORT"; exit 1; }
else
    command -v redis-server >/dev/null || { say "CLUSTER_BROKER=$CLUSTER_BROKER needs redis-server"; exit 1; }
fi

problems=()
read -r port_lo port_hi < /proc/sys/net/ipv4/ip_local_port_range
ports=$(( port_hi - port_lo + 1 ))
(( ports > PER_SOURCE + 2000 )) ||
    problems+=("net.ipv4.ip_local_port_range gives $ports ports per source address; set: sysctl -w net.ipv4.ip_local_port_range='15000 65000'")
somaxconn=$(cat /proc/sys/net/core/somaxconn)
(( somaxconn >= 1024 )) ||
    problems+=("net.core.somaxconn is $somaxconn, under pushgate's listen backlog of 1024; set: sysctl -w net.core.somaxconn=4096")
file_max=$(cat /proc/sys/fs/file-max)
(( file_max >= 2 * largest + 100000 )) ||
    problems+=("fs.file-max is $file_max; both ends of $largest loopback connections need more; set: sysctl -w fs.file-max=$(( 4 * largest + 200000 ))")
if [[ -r /proc/sys/net/netfilter/nf_conntrack_max ]]; then
    conntrack_max=$(cat /proc/sys/net/netfilter/nf_conntrack_max)
    (( conntrack_max >= 2 * largest )) ||
        problems+=("net.netfilter.nf_conntrack_max is $conntrack_max; set: sysctl -w net.netfilter.nf_conntrack_max=$(( 3 * largest ))")
fi
hard_files=$(ulimit -Hn)
[[ $hard_files == unlimited ]] || (( hard_files >= NODE_MAX_CONNECTIONS + 100 )) ||
    problems+=("the open files hard limit is $hard_files; a node needs $(( NODE_MAX_CONNECTIONS + 100 )) (ulimit -Hn, or lower NODE_MAX_CONNECTIONS in this script)")
if (( ${#problems[@]} > 0 )); then
    for p in "${problems[@]}"; do say "$p"; done
    say "nothing was changed; set the above (as root) and run again"
    exit 1
fi
ulimit -n "$hard_files"

# Where cargo puts its binaries (CARGO_TARGET_DIR, as cargo reads it).
target_dir=${CARGO_TARGET_DIR:-target}
if [[ -n ${LOADTEST_PUSHGATE_BIN:-} ]]; then
    pushgate_bin=$LOADTEST_PUSHGATE_BIN
    built_from="${LOADTEST_PUSHGATE_COMMIT:-unknown} ($pushgate_bin)"
else
    cargo build --release --bin pushgate
    pushgate_bin=$target_dir/release/pushgate
    built_from="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD -- src 2>/dev/null || echo ' with uncommitted changes in src/')"
fi
[[ -x $pushgate_bin ]] || { say "no pushgate binary at $pushgate_bin"; exit 1; }
cargo build --release -p loadtest

stamp=$(date -u +%Y%m%dT%H%M%SZ)
out=${CLUSTER_OUT:-loadtest/results/cluster-$stamp}
mkdir -p "$out"
# Absolute from here on: Redis and the load client's --broker-exec-after
# write into it from other working directories.
out=$(cd "$out" && pwd)
tmp=$(mktemp -d /tmp/pushgate-cluster.XXXXXX)
# Private copies: others may rebuild target/release meanwhile.
cp "$pushgate_bin" "$tmp/pushgate"
cp "$target_dir/release/loadtest" "$tmp/loadtest"
key_root="loadtest-cluster-$stamp"

# --- the broker ----------------------------------------------------------------

# publisher_ports: the Redis processes that run publish scripts (every
# master); redis_ports: every Redis process of the run.
publisher_ports=()
broker_toml=""
case "$CLUSTER_BROKER" in
    redis)
        redis_ports=("$REDIS_PORT")
        publisher_ports=("$REDIS_PORT")
        broker_toml=$(printf 'url = "redis://%s:%s"' "$REDIS_HOST" "$REDIS_PORT")
        ;;
    standalone)
        REDIS_HOST=127.0.0.1
        REDIS_PORT=$(free_port)
        mkdir -p "$tmp/standalone"
        redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --dir "$tmp/standalone" \
            --appendonly no --save '' --daemonize yes \
            --pidfile "$tmp/standalone/redis.pid" --logfile "$out/standalone-redis.log" >/dev/null
        for _ in $(seq 1 100); do
            [[ $(rcli ping 2>/dev/null) == PONG ]] && break
            sleep 0.1
        done
        [[ $(rcli ping 2>/dev/null) == PONG ]] || { say "the private Redis on port $REDIS_PORT did not start"; exit 1; }
        # Its replica: a cluster master forwards every script and SPUBLISH
        # to its replica, so the single Redis does the same work.
        replica_port=$(free_port)
        mkdir -p "$tmp/standalone-replica"
        redis-server --port "$replica_port" --bind 127.0.0.1 --dir "$tmp/standalone-replica" \
            --appendonly no --save '' --daemonize yes --replicaof 127.0.0.1 "$REDIS_PORT" \
            --pidfile "$tmp/standalone-replica/redis.pid" --logfile "$out/standalone-replica.log" >/dev/null
        for _ in $(seq 1 100); do
            redis-cli -p "$replica_port" info replication 2>/dev/null | grep -q 'master_link_status:up' && break
            sleep 0.1
        done
        redis-cli -p "$replica_port" info replication | grep -q 'master_link_status:up' ||
            { say "the private Redis's replica on port $replica_port never synced"; exit 1; }
        redis_ports=("$REDIS_PORT" "$replica_port")
        publisher_ports=("$REDIS_PORT")
        broker_toml=$(printf 'url = "redis://127.0.0.1:%s"' "$REDIS_PORT")
        ;;
    cluster)
        REDIS_HOST=127.0.0.1
        read -r -a redis_ports < <(tests/cluster/redis-cluster.sh start "$tmp/redis-cluster") || true
        (( ${#redis_ports[@]} == 6 )) || { say "the local Redis Cluster did not start (see $tmp/redis-cluster)"; exit 1; }
        publisher_ports=("${redis_ports[@]:0:3}")
        REDIS_PORT=${redis_ports[0]}
        seeds=()
        for port in "${publisher_ports[@]}"; do seeds+=("\"redis://127.0.0.1:$port\""); done
        broker_toml=$(printf 'cluster = true\nurl = "redis://127.0.0.1:%s"\nurls = [%s]\nshards = %s' \
            "$REDIS_PORT" "$(IFS=,; echo "${seeds[*]}")" "$CLUSTER_SHARDS")
        ;;
esac

if [[ $CLUSTER_BROKER != redis ]]; then
    for port in "${redis_ports[@]}"; do
        redis_pids+=("$(redis-cli -p "$port" info server | tr -d '\r' | awk -F: '/^process_id:/ {print $2}')")
    done
fi

# shellcheck source=loadtest/gateway-config.sh
source loadtest/gateway-config.sh
write_config "$tmp/base.toml" "$tmp/pushgate"

{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "pushgate built from: $built_from"
    echo "loadtest built from: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD -- loadtest/src 2>/dev/null || echo ' with uncommitted changes in loadtest/src/')"
    echo "machine: $(uname -sr), $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)"
    echo "redis: $(rcli info server | tr -d '\r' | awk -F: '/^redis_version/ {print $2}'), CLUSTER_BROKER=$CLUSTER_BROKER, ports ${redis_ports[*]} (pids ${redis_pids[*]:-not local}) on $REDIS_HOST (publishing: ${publisher_ports[*]}), $(rcli config get client-output-buffer-limit | tr -d '\r' | tail -n1)"
    echo "kernel: ip_local_port_range $port_lo-$port_hi, somaxconn $somaxconn, file-max $file_max, open files per process $hard_files"
    echo "node config: load config of loadtest/gateway-config.sh, [session] max_connections = $NODE_MAX_CONNECTIONS, [server] cores = $CLUSTER_NODE_CORES, [broker] kind = \"redis\", $(echo "$broker_toml" | paste -sd' '), key_prefix = $key_root-<step>"
    echo "steps: ${steps[*]}"
} >"$out/about.txt"

# --- nodes -----------------------------------------------------------------

node_pids=()
node_addrs=()
idle_ms=""
sub_pid=""
prefix=""

stop_nodes() {
    local pid
    for pid in "${node_pids[@]}"; do
        kill -0 "$pid" 2>/dev/null || continue
        kill -TERM "$pid" 2>/dev/null || true
    done
    for pid in "${node_pids[@]}"; do
        for _ in $(seq 1 100); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    node_pids=()
    node_addrs=()
}

drop_keys() {
    local pattern=$1
    # A private Redis or cluster goes away with its keys at the end.
    [[ $CLUSTER_BROKER == redis ]] || return 0
    local n
    n=$(rcli --scan --pattern "$pattern" | wc -l)
    rcli --scan --pattern "$pattern" | xargs -r -n 500 redis-cli -h "$REDIS_HOST" -p "$REDIS_PORT" DEL >/dev/null
    say "deleted $n Redis keys matching $pattern"
}

cleanup() {
    [[ -n $sub_pid ]] && kill "$sub_pid" 2>/dev/null || true
    stop_nodes
    drop_keys "$key_root-*"
    case "$CLUSTER_BROKER" in
        standalone)
            [[ -z $replica_port ]] || redis-cli -p "$replica_port" shutdown nosave >/dev/null 2>&1 || true
            rcli shutdown nosave >/dev/null 2>&1 || true ;;
        cluster) tests/cluster/redis-cluster.sh stop "$tmp/redis-cluster" >/dev/null 2>&1 || true ;;
    esac
    rm -rf "$tmp"
}
trap cleanup EXIT

# start_nodes STEP K: K fresh nodes under key prefix <key_root>-STEP.
start_nodes() {
    local step=$1 k=$2 i addr pid
    prefix="$key_root-$step"
    cp "$tmp/base.toml" "$tmp/$step.toml"
    sed -i "s/^max_connections = .*/max_connections = $NODE_MAX_CONNECTIONS/" "$tmp/$step.toml"
    # Only when set: a binary from before `cores` refuses the key.
    if [[ $CLUSTER_NODE_CORES != 0 ]]; then
        sed -i "s/^\[server\]\$/[server]\ncores = $CLUSTER_NODE_CORES/" "$tmp/$step.toml"
    fi
    printf '\n[broker]\nkind = "redis"\n%s\nkey_prefix = "%s"\n' \
        "$broker_toml" "$prefix" >>"$tmp/$step.toml"
    "$tmp/pushgate" check-config --config "$tmp/$step.toml" >/dev/null
    for i in $(seq 1 "$k"); do
        PUSHGATE_LOG=info "$tmp/pushgate" --config "$tmp/$step.toml" \
            >"$out/$step.node$i.log" 2>&1 </dev/null &
        pid=$!
        node_pids+=("$pid")
        addr=""
        for _ in $(seq 1 100); do
            addr=$(grep -a "serving" "$out/$step.node$i.log" 2>/dev/null | grep -ao '127\.0\.0\.1:[0-9]\+' | head -n1 || true)
            [[ -n $addr ]] && break
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        [[ -n $addr ]] || { say "node $i of $step did not start (see $out/$step.node$i.log)"; exit 1; }
        node_addrs+=("$addr")
        say "$step: node $i pid $pid on $addr"
    done
    sleep 1 # settle before the baseline reading
    idle_ms=""
    if (( CLUSTER_IDLE_SECS > 0 )); then
        local before=() after=() j
        for pid in "${node_pids[@]}"; do before+=("$(cpu_ticks "$pid")"); done
        sleep "$CLUSTER_IDLE_SECS"
        for pid in "${node_pids[@]}"; do after+=("$(cpu_ticks "$pid")"); done
        for j in "${!node_pids[@]}"; do
            idle_ms+="$(( (after[j] - before[j]) * 1000 / clk_tck )) "
        done
        echo "$step: CPU ms per node over ${CLUSTER_IDLE_SECS} s idle, no clients: $idle_ms" >>"$out/about.txt"
    fi
}

clk_tck=$(getconf CLK_TCK)
# cpu_ticks PID: utime + stime of PID (fields 14 and 15 of /proc/PID/stat,
# counted past the command name, which may hold spaces).
cpu_ticks() {
    local stat
    stat=$(cat "/proc/$1/stat")
    stat=${stat##*) }
    awk '{print $12 + $13}' <<<"$stat"
}

# urls FORMAT [FIRST LAST]: FORMAT (with %s for the address) for nodes
# FIRST..LAST (1-based, default all), comma-separated.
urls() {
    local format=$1 first=${2:-1} last=${3:-${#node_addrs[@]}} i list=()
    for (( i = first; i <= last; i++ )); do
        # shellcheck disable=SC2059
        list+=("$(printf "$format" "${node_addrs[i - 1]}")")
    done
    (IFS=,; echo "${list[*]}")
}

pids() {
    local first=${1:-1} last=${2:-${#node_pids[@]}}
    (IFS=,; echo "${node_pids[*]:first-1:last-first+1}")
}

# publish_calls: PUBLISH and SPUBLISH calls so far, summed over the
# masters (a script's calls count too).
publish_calls() {
    local port total=0 calls
    for port in "${publisher_ports[@]}"; do
        calls=$(redis-cli -h "$REDIS_HOST" -p "$port" info commandstats | tr -d '\r' |
            sed -n 's/^cmdstat_s\{0,1\}publish:calls=\([0-9]*\),.*/\1/p' | awk '{t += $1} END {print t + 0}')
        total=$(( total + calls ))
    done
    echo "$total"
}

# redis_cpu_ms: one line, each Redis process's CPU so far (user + system,
# ms, from INFO cpu), in the order of redis_ports.
redis_cpu_ms() {
    local port
    for port in "${redis_ports[@]}"; do
        redis-cli -h "$REDIS_HOST" -p "$port" info cpu | tr -d '\r' |
            awk -F: '/^used_cpu_(sys|user):/ {t += $2} END {printf "%d ", t * 1000}'
    done
    echo
}

# bus_received: one line, each node's pushgate_bus_messages_received_total
# (or -1 for a node that does not answer), in the order of node_addrs.
bus_received() {
    local addr n
    for addr in "${node_addrs[@]}"; do
        n=$({ curl -s --max-time 5 "http://$addr/metrics" || true; } |
            awk '/^pushgate_bus_messages_received_total[ {]/ {t += $NF; seen = 1} END {if (seen) print t; else print -1}')
        printf '%s ' "${n:--1}"
    done
    echo
}

# commandstats NAME WINDOW: from each Redis's NAME.info-<port>.txt (INFO
# commandstats and stats over the pushes, --broker-exec-after) and its CPU
# over the same window (WINDOW, ms per process), NAME.commandstats.md: per
# process its CPU, the time its commands took (the rest is outside
# commands: reads, writes, the event loop, cluster and replication work),
# its reads and writes, and per command its calls and times.
commandstats() {
    local name=$1 window=$2 i port file cpu
    [[ -f $out/$name.info-${redis_ports[0]}.txt ]] || return 0
    {
        echo "Redis over the pushes (CONFIG RESETSTAT before the first push; CPU from /proc over the same window)"
        echo
        echo "| port | CPU ms | scripts: calls / ms in them | other top-level commands: calls / ms | commands (scripts' own included) | reads | writes | net in / out KB |"
        echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
        for i in "${!redis_ports[@]}"; do
            port=${redis_ports[i]}
            file=$out/$name.info-$port.txt
            cpu=$(jq ".[$i] // 0" <<<"$window" 2>/dev/null || echo 0)
            # Commands a script runs count too, under their own names:
            # "other top-level" leaves out those the publish scripts run.
            awk -F'[:,=]' -v port="$port" -v cpu="$cpu" '
                /^cmdstat_(evalsha|eval|fcall):/ {scalls += $3; susec += $5; next}
                /^cmdstat_(get|set|time|zrevrangebyscore|zremrangebyscore|xadd|xlen|xrange|xdel|pexpire|pexpireat|incr|publish|spublish|zadd|multi|exec):/ {next}
                /^cmdstat_/ {ocalls += $3; ousec += $5}
                /^total_commands_processed:/ {cmds = $2}
                /^total_reads_processed:/ {reads = $2}
                /^total_writes_processed:/ {writes = $2}
                /^total_net_input_bytes:/ {nin = $2}
                /^total_net_output_bytes:/ {nout = $2}
                END {printf "| %s | %d | %d / %.0f | %d / %.0f | %d | %d | %d | %d / %d |\n", port, cpu, scalls, susec / 1000,
                    ocalls, ousec / 1000, cmds, reads, writes, nin / 1024, nout / 1024}' "$file"
        done
        echo
        echo "| port | command | calls | usec | usec per call |"
        echo "| --- | --- | ---: | ---: | ---: |"
        for port in "${redis_ports[@]}"; do
            awk -F'[:,=]' -v port="$port" '/^cmdstat_/ {sub(/^cmdstat_/, "", $1)
                printf "| %s | %s | %d | %d | %s |\n", port, $1, $3, $5, $7}' "$out/$name.info-$port.txt"
        done
    } >"$out/$name.commandstats.md"
}

# run NAME PUSHES TOTAL_CONNECTIONS LOADTEST_ARGS...: one load client run
# against the running nodes, with PUBLISH counted around it (Redis-wide
# from INFO commandstats, and on this step's channel by a subscriber).
run() {
    local name=$1 pushes=$2 total=$3
    shift 3
    local sources=$(( (total + PER_SOURCE - 1) / PER_SOURCE ))
    local cmd=("$tmp/loadtest" "$@"
        --sources "$sources" --per-worker 19000 --timeout-secs 600
        --json "$out/$name.json" --markdown "$out/$name.md")
    if (( ${#redis_pids[@]} > 0 )); then
        cmd+=(--broker-pid "$(IFS=,; echo "${redis_pids[*]}")")
        # Over the same window (a Redis of our own only: RESETSTAT clears
        # counters others may read): each process's per-command counts
        # and times, and its reads and writes.
        cmd+=(--broker-exec-before "for p in ${redis_ports[*]}; do redis-cli -p \$p config resetstat >/dev/null || exit 1; done"
            --broker-exec-after "for p in ${redis_ports[*]}; do { redis-cli -p \$p info commandstats && redis-cli -p \$p info stats; } | tr -d '\\r' >'$out/$name.info-'\$p.txt || exit 1; done")
    fi
    echo "$name: ${cmd[*]}" | sed "s|$tmp/loadtest|target/release/loadtest|; s|$PWD/||g" >>"$out/commands.txt"
    if [[ $CLUSTER_BROKER != cluster ]]; then
        redis-cli -h "$REDIS_HOST" -p "$REDIS_PORT" --csv subscribe "$prefix:bus" \
            >"$out/$name.channel.log" 2>&1 &
        sub_pid=$!
        sleep 0.5
    fi
    local calls_before load_before cpu_before status=0
    calls_before=$(publish_calls)
    cpu_before=$(redis_cpu_ms)
    load_before=$(cut -d' ' -f1-3 /proc/loadavg)
    say "$name: ${cmd[*]}"
    "${cmd[@]}" || status=$?
    local calls_after load_after cpu_after received
    calls_after=$(publish_calls)
    cpu_after=$(redis_cpu_ms)
    received=$(bus_received)
    load_after=$(cut -d' ' -f1-3 /proc/loadavg)
    # Each Redis's CPU from the first push to the last delivery, as the
    # load client read it (null without --broker-pid or its result).
    local window server_cpu_ms
    window=$(jq -c '.results.broker_cpu_ms_per_pid // null' "$out/$name.json" 2>/dev/null) || window=null
    server_cpu_ms=$(jq '.results.server_cpu_ms // null' "$out/$name.json" 2>/dev/null) || server_cpu_ms=null
    commandstats "$name" "$window"
    local on_channel=null
    if [[ -n $sub_pid ]]; then
        sleep 0.5
        kill "$sub_pid" 2>/dev/null || true
        wait "$sub_pid" 2>/dev/null || true
        sub_pid=""
        on_channel=$(grep -c '^"message"' "$out/$name.channel.log" || true)
    fi
    jq -n --arg name "$name" --argjson pushes "$pushes" --argjson status "$status" \
        --argjson before "$calls_before" --argjson after "$calls_after" \
        --argjson channel "$on_channel" --arg load_before "$load_before" --arg load_after "$load_after" \
        --argjson nodes "${#node_pids[@]}" --arg broker "$CLUSTER_BROKER" \
        --arg ports "${redis_ports[*]}" --arg cpu_before "$cpu_before" --arg cpu_after "$cpu_after" \
        --arg received "$received" --arg idle_ms "$idle_ms" --argjson idle_secs "$CLUSTER_IDLE_SECS" --argjson window "${window:-null}" \
        --argjson server_cpu_ms "${server_cpu_ms:-null}" \
        'def nums: [splits(" +") | select(length > 0) | tonumber];
         ($ports | nums) as $ports | ($cpu_before | nums) as $b | ($cpu_after | nums) as $a
         | [range(0; $ports | length) | {port: $ports[.],
              cpu_ms: (if $window != null then $window[.] else ($a[.] - $b[.]) end),
              cpu_ms_whole_run: ($a[.] - $b[.])}] as $redis
         | ($redis | max_by(.cpu_ms)) as $busiest
         | {step: $name, broker: $broker, nodes: $nodes, exit_status: $status, pushes: $pushes,
          publish_calls_redis_wide: ($after - $before), messages_on_channel: $channel,
          publishes_per_push: (if $pushes == 0 then null
              elif $channel != null then ($channel / $pushes) else (($after - $before) / $pushes) end),
          redis_cpu_window: (if $window != null then "first push to last delivery (/proc)"
              else "whole load client run (INFO cpu)" end),
          redis_cpu: $redis, busiest_redis_cpu_ms: $busiest.cpu_ms,
          busiest_redis_cpu_per_push_us: (if $pushes > 0 then ($busiest.cpu_ms * 1000 / $pushes) else null end),
          gateway_cpu_per_push_us: (if $pushes > 0 and $server_cpu_ms != null
              then ($server_cpu_ms * 1000 / $pushes) else null end),
          bus_messages_received_per_node: ($received | nums),
          node_idle_cpu_ms: (if $idle_secs > 0 then {secs: $idle_secs, per_node: ($idle_ms | nums)} else null end),
          load_average_before: $load_before, load_average_after: $load_after}' \
        >"$out/$name.redis.json"
    echo "$name: load average $load_before -> $load_after, (S)PUBLISH calls $((calls_after - calls_before)) on the masters, ${on_channel} on $prefix:bus, Redis CPU ms (${redis_ports[*]}): $cpu_before -> $cpu_after (INFO cpu, whole run), first push to last delivery: $window, bus messages received per node: $received, $pushes pushes, exit $status" >>"$out/about.txt"
    return "$status"
}

# --- steps -------------------------------------------------------------------

wait_time_wait() {
    local tw
    for _ in $(seq 1 70); do
        tw=$(ss -Htan state time-wait | wc -l)
        (( tw < TIME_WAIT_MAX )) && return 0
        sleep 1
    done
    say "still $tw sockets in TIME_WAIT after 70 s; going on (connections may fail to bind)"
}

fanout() {
    local step=$1 k=$2 ws=$3 sse=$4 poll=$5 status=0
    start_nodes "$step" "$k"
    run "$step" "$CLUSTER_MESSAGES" $(( ws + sse + poll )) mixed \
        --ws "$ws" --sse "$sse" --poll "$poll" -m "$CLUSTER_MESSAGES" -r "$CLUSTER_RATE" \
        --ws-url "$(urls 'ws://%s/ws?uid={user}')" \
        --sse-url "$(urls 'http://%s/sse?uid={user}')" \
        --poll-url "$(urls 'http://%s/poll?uid={user}')" \
        --push-url "$(urls 'http://%s/push')" \
        --metrics-url "$(urls 'http://%s/metrics')" \
        --pid "$(pids)" --connect-rate 5000 --check || status=$?
    stop_nodes
    drop_keys "$prefix:*"
    return "$status"
}

failover() {
    local status=0
    start_nodes failover 5
    # Pushes go to nodes 1-4 and only their CPU is read: node 5 is killed.
    run failover "$(( FAILOVER_MESSAGES + 1 ))" $(( FAILOVER_WS + FAILOVER_SSE + FAILOVER_POLL )) failover \
        --ws "$FAILOVER_WS" --sse "$FAILOVER_SSE" --poll "$FAILOVER_POLL" \
        -m "$FAILOVER_MESSAGES" -r "$FAILOVER_RATE" \
        --kill-pid "${node_pids[4]}" --kill-after-secs "$FAILOVER_KILL_AFTER" \
        --ws-url "$(urls 'ws://%s/ws?uid={user}')" \
        --sse-url "$(urls 'http://%s/sse?uid={user}')" \
        --poll-url "$(urls 'http://%s/poll?uid={user}')" \
        --push-url "$(urls 'http://%s/push' 1 4)" \
        --metrics-url "$(urls 'http://%s/metrics')" \
        --pid "$(pids 1 4)" --connect-rate 5000 --check || status=$?
    stop_nodes
    drop_keys "$prefix:*"
    return "$status"
}

# personal STEP K RATE [USERS ROUNDS BATCH PUSH_CONNS]: USERS WebSockets on
# K nodes, ROUNDS personal pushes each, BATCH users per push, PUSH_CONNS
# pushes in flight.
personal() {
    local step=$1 k=$2 rate=$3 n=${4:-$PERSONAL_N} rounds=${5:-$PERSONAL_ROUNDS} batch=${6:-$PERSONAL_BATCH} conns=${7:-4} status=0
    start_nodes "$step" "$k"
    local pushes=$(( (n + batch - 1) / batch * rounds ))
    run "$step" "$pushes" "$n" personal \
        -n "$n" -m "$rounds" --batch "$batch" -r "$rate" --push-conns "$conns" \
        --ws-url "$(urls 'ws://%s/ws?uid={user}')" \
        --push-url "$(urls 'http://%s/push')" \
        --pid "$(pids)" --connect-rate "$(( PERSONAL_CONNECT_RATE * k ))" --check || status=$?
    stop_nodes
    drop_keys "$prefix:*"
    return "$status"
}

failed=()
for step in "${steps[@]}"; do
    wait_time_wait
    say "== $step (load average $(cut -d' ' -f1-3 /proc/loadavg))"
    case "$step" in
        fanout-1) fanout fanout-1 1 $(( CLUSTER_WS / 5 )) $(( CLUSTER_SSE / 5 )) $(( CLUSTER_POLL / 5 )) || failed+=("$step") ;;
        fanout-5) fanout fanout-5 5 "$CLUSTER_WS" "$CLUSTER_SSE" "$CLUSTER_POLL" || failed+=("$step") ;;
        fanout-5-small) fanout fanout-5-small 5 $(( CLUSTER_WS / 5 )) $(( CLUSTER_SSE / 5 )) $(( CLUSTER_POLL / 5 )) || failed+=("$step") ;;
        failover) failover || failed+=("$step") ;;
        personal-1) personal personal-1 1 0 || failed+=("$step") ;;
        personal-3) personal personal-3 3 0 || failed+=("$step") ;;
        personal-1-paced) personal personal-1-paced 1 "$PERSONAL_PACED_RATE" || failed+=("$step") ;;
        personal-3-paced) personal personal-3-paced 3 "$PERSONAL_PACED_RATE" || failed+=("$step") ;;
        streams-1) personal streams-1 1 0 "$STREAMS_N" "$STREAMS_ROUNDS" 1 "$STREAMS_PUSH_CONNS" || failed+=("$step") ;;
    esac
    # A failed run leaves its nodes up: stop them before the next step.
    stop_nodes
done

# --- summary -----------------------------------------------------------------

summary_steps=()
for step in "${steps[@]}"; do
    [[ -s $out/$step.json && -s $out/$step.redis.json ]] && summary_steps+=("$step")
done
if (( ${#summary_steps[@]} > 0 )); then
    args=()
    for step in "${summary_steps[@]}"; do args+=("$out/$step.json" "$out/$step.redis.json"); done
    jq -s '[range(0; length; 2) as $i | {step: .[$i + 1].step} + .[$i + 1] + {results: .[$i].results, params: .[$i].params}]' \
        "${args[@]}" >"$out/summary.json"
    {
        echo "| step | nodes | clients | pushes | pushing took | delivered | lost | dup | time to last p50 / max | latency p50 / p99 | server CPU while pushing | server CPU per delivery | push round trip p50 | PUBLISH per push | exit |"
        echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
        jq -r '.[] | [.step, .nodes, .results.connections_opened, .pushes,
            "\(.results.push_secs) s", .results.delivered,
            .results.lost, .results.duplicates,
            "\(.results.time_to_last.p50_ms) / \(.results.time_to_last.max_ms) ms",
            "\(.results.latency.p50_ms) / \(.results.latency.p99_ms) ms",
            "\(.results.server_cpu_ms // "-") ms",
            "\(.results.cpu_per_delivery_us // "-") µs",
            "\(.results.push_rtt.p50_ms) ms",
            .publishes_per_push, .exit_status] | map(tostring) | "| " + join(" | ") + " |"' \
            "$out/summary.json"
        echo
        echo "| step | broker | nodes | pushes | (S)PUBLISH per push | busiest Redis: CPU / per push | gateway CPU per push | Redis CPU per process | over | bus messages received per node |"
        echo "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- | --- | --- |"
        jq -r '.[] | [.step, .broker, .nodes, .pushes, .publishes_per_push,
            "\(.busiest_redis_cpu_ms) ms / \(.busiest_redis_cpu_per_push_us) µs",
            "\(.gateway_cpu_per_push_us // "-") µs",
            (.redis_cpu | map("\(.cpu_ms)") | join(" / ")) + " ms", .redis_cpu_window,
            (.bus_messages_received_per_node | map(tostring) | join(" / "))] | map(tostring) | "| " + join(" | ") + " |"' \
            "$out/summary.json"
    } >"$out/summary.md"
    cat "$out/summary.md"
fi
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/about.txt"
say "results in $out"
if (( ${#failed[@]} > 0 )); then
    say "FAILED: ${failed[*]}"
    exit 1
fi
