#!/usr/bin/env bash
# A local Redis Cluster on loopback: 3 masters and 3 replicas, each
# `redis-server --cluster-enabled yes` on a free port, in a temporary
# directory. Used by the Rust tests (tests/support/cluster.rs) and by
# loadtest/cluster.sh.
#
#   tests/cluster/redis-cluster.sh start DIR   starts the six servers in DIR, forms the
#                                               cluster, waits until it is ok, prints the
#                                               six ports (masters first) on one line
#   tests/cluster/redis-cluster.sh stop DIR    stops every server started in DIR (by pid) and
#                                               waits up to 5 s for each to exit
#   tests/cluster/redis-cluster.sh restart DIR PORT
#                                               starts the node on PORT again (after a test
#                                               killed it), on its own nodes.conf, and waits
#                                               until it answers
#
# Needs redis-server and redis-cli 7 or newer (sharded pub/sub).
set -euo pipefail

cmd=${1:?usage: redis-cluster.sh start|stop DIR}
dir=${2:?usage: redis-cluster.sh start|stop DIR}

# A port free now whose cluster bus port (port + 10000, below 65536) is
# free too.
here=$(cd "$(dirname "$0")" && pwd)
free_port() {
  python3 "$here/free-port.py"
}

# Starts (daemonized) the node of DIR on port $1, in $dir/$1; fails if it
# does not start.
node_start() {
  local node="$dir/$1"
  mkdir -p "$node"
  redis-server --port "$1" --bind 127.0.0.1 --cluster-enabled yes \
    --cluster-config-file "$node/nodes.conf" --cluster-node-timeout 2000 \
    --cluster-replica-validity-factor 0 \
    --dir "$node" --appendonly no --save '' --daemonize yes \
    --pidfile "$node/redis.pid" --logfile "$node/redis.log" >/dev/null
}

# Waits up to 10 s for the node on port $1 to answer PING.
node_answers() {
  for _ in $(seq 100); do
    if redis-cli -p "$1" ping >/dev/null 2>&1; then return 0; fi
    sleep 0.1
  done
  return 1
}

case "$cmd" in
start)
  mkdir -p "$dir"
  ports=()
  # A port taken between the check and the start (a busy machine opens
  # ephemeral ports all the time) makes the daemonized server exit: a node
  # that never answers is given up and another port tried.
  while [ "${#ports[@]}" -lt 6 ]; do
    port=$(free_port)
    case " ${ports[*]:-} " in *" $port "*) continue ;; esac
    node="$dir/$port"
    node_start "$port" || continue
    up=false
    node_answers "$port" && up=true
    if $up; then
      ports+=("$port")
    else
      [ -f "$node/redis.pid" ] && kill "$(cat "$node/redis.pid")" 2>/dev/null
      mv "$node" "$node.failed"
    fi
  done
  hosts=()
  for port in "${ports[@]}"; do hosts+=("127.0.0.1:$port"); done
  redis-cli --cluster create "${hosts[@]}" --cluster-replicas 1 --cluster-yes >"$dir/create.log" 2>&1
  for port in "${ports[@]}"; do
    ok=false
    for _ in $(seq 200); do
      if redis-cli -p "$port" cluster info 2>/dev/null | grep -q 'cluster_state:ok'; then
        ok=true; break
      fi
      sleep 0.1
    done
    $ok || { echo "cluster node $port never reached cluster_state:ok" >&2; exit 1; }
  done
  # Replicas in sync with their masters, so a master killed right away
  # fails over.
  for port in "${ports[@]}"; do
    if redis-cli -p "$port" info replication | grep -q '^role:slave'; then
      ok=false
      for _ in $(seq 200); do
        if redis-cli -p "$port" info replication | grep -q 'master_link_status:up'; then
          ok=true; break
        fi
        sleep 0.1
      done
      $ok || { echo "replica $port never synced with its master" >&2; exit 1; }
    fi
  done
  # Masters first: the ports in the order of `cluster nodes`' roles.
  masters=$(redis-cli -p "${ports[0]}" cluster nodes | awk '/master/ {split($2, a, "[:@]"); print a[2]}' | sort -n)
  replicas=$(redis-cli -p "${ports[0]}" cluster nodes | awk '/slave/ {split($2, a, "[:@]"); print a[2]}' | sort -n)
  echo $masters $replicas
  ;;
restart)
  port=${3:?usage: redis-cluster.sh restart DIR PORT}
  node_start "$port"
  node_answers "$port" || { echo "node $port did not come back" >&2; exit 1; }
  ;;
stop)
  pids=()
  for pidfile in "$dir"/*/redis.pid; do
    [ -f "$pidfile" ] || continue
    pid=$(cat "$pidfile")
    kill "$pid" 2>/dev/null && pids+=("$pid")
  done
  # Gone before the caller removes DIR: a node still shutting down writes
  # its nodes.conf there (an `rm -rf` then fails on a directory not empty).
  for pid in "${pids[@]}"; do
    for _ in $(seq 100); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.05
    done
  done
  ;;
*)
  echo "usage: redis-cluster.sh start|stop DIR, or restart DIR PORT" >&2
  exit 2
  ;;
esac
